# frozen_string_literal: true

require_relative "../test_helper"
require "weft/postgres"

# Weft::Postgres::Waiter: what a caller of Pool#query sleeps on. On Weft's reactor it parks the
# fiber with the scheduler itself; elsewhere it is a condition variable. Either way it behaves
# as ConditionVariable#wait does for the pool: the lock is released while waiting and held
# again when it returns, whatever ended the wait.
class PostgresWaiterTest < Minitest::Test
  def setup
    @lock = Thread::Mutex.new
    @waiter = Weft::Postgres::Waiter.new
  end

  def test_a_fiber_sleeps_until_signalled_and_holds_the_lock_again
    order = []
    Weft.run do
      sleeper = Weft.spawn do
        @lock.synchronize do
          order << :waiting
          @waiter.wait(@lock)
          order << (@lock.owned? ? :woken_with_lock : :woken_without_lock)
        end
      end
      Weft.spawn do
        @lock.synchronize do # free while the sleeper waits
          order << :signalling
          @waiter.signal
        end
      end.wait
      sleeper.wait
    end
    assert_equal %i[waiting signalling woken_with_lock], order
  end

  def test_a_timeout_ends_the_wait_with_the_lock_held
    owned, elapsed = Weft.run do
      @lock.synchronize do
        started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
        @waiter.wait(@lock, 0.05)
        [@lock.owned?, Process.clock_gettime(Process::CLOCK_MONOTONIC) - started]
      end
    end
    assert owned
    assert_operator elapsed, :>=, 0.05
  end

  def test_a_cancelled_waiter_holds_the_lock_again_and_a_later_signal_is_harmless
    owned = nil
    Weft.run do
      task = Weft.spawn do
        @lock.synchronize do
          @waiter.wait(@lock)
        rescue Weft::Cancelled
          owned = @lock.owned?
          raise
        end
      end
      sleep 0.01
      task.cancel
      task.wait
      assert_predicate task, :cancelled?
      @lock.synchronize { @waiter.signal } # nobody waits: nothing happens
    end
    assert owned, "the lock was not held again after the cancellation"
  end

  def test_a_signal_from_another_thread_wakes_the_fiber
    woken = Weft.run do
      Weft.spawn do
        @lock.synchronize do
          Thread.new do
            sleep 0.02
            @lock.synchronize { @waiter.signal }
          end
          @waiter.wait(@lock, 5)
          true
        end
      end.wait
    end
    assert woken
  end

  def test_outside_a_reactor_it_is_a_condition_variable
    thread = Thread.new do
      @lock.synchronize { @waiter.wait(@lock) }
      :woken
    end
    sleep 0.01 until thread.status == "sleep"
    @lock.synchronize { @waiter.signal }
    assert_equal :woken, thread.value
  end

  # A Waiter keeps the reactor it parked on (Waiter#wait); the same Waiter on another reactor
  # later, or outside any, must still sleep there and be woken.
  def test_one_waiter_on_a_reactor_then_outside_one_then_on_another
    woken = []
    started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    2.times do |round|
      woken << Weft.run do
        sleeper = Weft.spawn { @lock.synchronize { @waiter.wait(@lock, 5) } }
        Weft.spawn { @lock.synchronize { @waiter.signal } }.wait
        sleeper.wait
        :"reactor_#{round}"
      end
      next unless round.zero?

      thread = Thread.new do
        @lock.synchronize { @waiter.wait(@lock, 5) }
        :outside
      end
      sleep 0.01 until thread.status == "sleep"
      @lock.synchronize { @waiter.signal }
      woken << thread.value
    end
    assert_equal %i[reactor_0 outside reactor_1], woken
    assert_operator Process.clock_gettime(Process::CLOCK_MONOTONIC) - started, :<, 4, "a wait ran into its timeout"
  end
end
