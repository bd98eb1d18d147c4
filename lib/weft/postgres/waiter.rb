# frozen_string_literal: true

require_relative "../scheduler"

module Weft
  module Postgres
    # What a caller of Pool#query sleeps on while its statement is in a pipeline: a condition
    # variable for one waiter at a time, with the two methods of Thread::ConditionVariable the
    # pipeline uses (#wait with the pool's lock held, #signal under it).
    #
    # In a task on Weft's reactor it parks the fiber with the scheduler and wakes it with
    # Scheduler#wake. A ConditionVariable gets there the long way round, once for every
    # statement: ConditionVariable#wait calls Mutex#sleep (through Weft's fix for it on Ruby
    # 3.1, MutexSleepFix), which calls the scheduler's kernel_sleep hook, and #signal calls its
    # unblock hook. Elsewhere (plain threads, a blocking fiber, another fiber scheduler) it is a
    # Thread::ConditionVariable, made on first use.
    class Waiter
      def initialize
        @fiber = nil     # the fiber parked in #wait on Weft's reactor, until woken
        @scheduler = nil # that fiber's reactor, while it is parked
        @condition = nil # for waiters elsewhere
      end

      # Releases `lock`, sleeps until #signal is called or `timeout` seconds pass, and takes
      # `lock` back (also when an exception, a task's cancellation, ends the sleep). As with a
      # condition variable, the caller checks what it waits for again when this returns.
      # @param lock [Thread::Mutex] held by the caller
      # @param timeout [Numeric, nil] seconds; nil: no limit
      # @return [void]
      def wait(lock, timeout = nil)
        scheduler = Fiber.scheduler
        fiber = Fiber.current
        unless scheduler.is_a?(Scheduler) && !fiber.blocking?
          (@condition ||= Thread::ConditionVariable.new).wait(lock, timeout)
          return
        end

        # The reactor is kept only while the fiber is parked: a pool keeps its idle waiters
        # (Pool#pipelined reuses them), and one that kept the reactor of its last wait would
        # keep a finished reactor, and the idle fibers it pools, from the garbage collector.
        @fiber = fiber
        @scheduler = scheduler
        lock.unlock
        begin
          scheduler.suspend(timeout, self)
        ensure
          lock.lock
          @fiber = nil # under the lock, where #signal reads it
          @scheduler = nil
        end
      end

      # Wakes the waiter, if one waits; called with the lock held. A waiter on Weft's reactor
      # runs on the reactor's next turn (from another thread: once the reactor has taken the
      # wake-up, see Scheduler#wake_from_any_thread). On the reactor's own thread, where a
      # pipeline's reader wakes the callers of every statement it settles, it goes to
      # Scheduler#wake without the detour.
      # @return [void]
      def signal
        fiber = @fiber
        if fiber
          @fiber = nil
          scheduler = @scheduler
          if Thread.current.equal?(scheduler.thread)
            scheduler.wake(fiber, true, self)
          else
            scheduler.wake_from_any_thread(fiber, self)
          end
        else
          @condition&.signal
        end
      end
    end
  end
end
