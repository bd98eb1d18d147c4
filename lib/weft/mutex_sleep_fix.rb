# frozen_string_literal: true

module Weft
  # Keeps Thread::Mutex#sleep's promise to return holding the lock.
  #
  # Under a fiber scheduler, Ruby 3.1's Mutex#sleep (which ConditionVariable#wait calls)
  # unlocks, sleeps through the scheduler, and re-locks only if the sleep returns normally. If
  # the sleep is interrupted by an exception (Timeout.timeout, Weft.timeout, Task#cancel) the
  # mutex stays unlocked, and the enclosing Mutex#synchronize then fails in its ensure with
  # "Attempt to unlock a mutex which is not locked", replacing the real exception:
  #
  #   Timeout.timeout(1) { mutex.synchronize { condition.wait(mutex) } } # => ThreadError
  #
  # Re-locking on the way out restores the documented behaviour. Where Ruby already re-locked,
  # #owned? is true and this does nothing. Ruby 3.3 re-locks by itself (checked on 3.3.8 with
  # the example above), so the prepend happens only on older Rubies: 3.1, where it is needed,
  # and 3.2, which has not been tried.
  module MutexSleepFix
    # Mutex#sleep, re-locking the mutex if the sleep ends in an exception (see above).
    # @param timeout [Numeric, nil] seconds
    def sleep(timeout = nil)
      super
    rescue Exception # rubocop:disable Lint/RescueException
      lock unless owned?
      raise
    end
  end
end

Thread::Mutex.prepend(Weft::MutexSleepFix) if RUBY_VERSION < "3.3"
