# frozen_string_literal: true

require_relative "../test_helper"
require_relative "support/remaining"
require "weft/resilience"

class BulkheadTest < Minitest::Test
  include Weft::Test::Remaining

  def elapsed
    started = Weft::Timers.now
    yield
    Weft::Timers.now - started
  end

  def test_limit_holds_under_fifty_concurrent_tasks
    bulkhead = Weft::Bulkhead.new(limit: 5, queue: 50)
    inside = 0
    peak = 0
    Weft.run do
      Weft.gather(Array.new(50) do
        Weft.spawn do
          bulkhead.call do
            inside += 1
            peak = [peak, inside].max
            sleep 0.01
            inside -= 1
          end
        end
      end)
    end
    assert_equal 5, peak
    assert_equal 0, bulkhead.active
    assert_equal 0, bulkhead.waiting
  end

  def test_waiting_tasks_overlap_in_waves_of_the_limit
    bulkhead = Weft::Bulkhead.new(limit: 10, queue: 10)
    time = elapsed do
      Weft.run { Weft.gather(Array.new(20) { Weft.spawn { bulkhead.call { sleep 0.3 } } }) }
    end
    assert_operator time, :>=, 0.55 # two waves of 0.3 s ...
    assert_operator time, :<, 1.5   # ... not twenty
  end

  def test_a_full_queue_refuses_at_once
    bulkhead = Weft::Bulkhead.new(limit: 1, queue: 2)
    Weft.run do
      release = Weft::Promise.new
      holders = Array.new(3) { Weft.spawn { bulkhead.call { release.wait } } }
      sleep 0.01
      assert_equal [1, 2], [bulkhead.active, bulkhead.waiting]
      error = nil
      time = elapsed { error = assert_raises(Weft::BulkheadFull) { bulkhead.call { flunk "ran past a full queue" } } }
      assert_operator time, :<, 0.05
      assert_match(/1 running, 2 waiting/, error.message)
      assert_kind_of Weft::Rejected, error
      release.fulfill(true)
      Weft.gather(holders)
    end
    assert_equal 0, bulkhead.active
  end

  def test_waiting_is_bounded_by_the_timeout
    bulkhead = Weft::Bulkhead.new(limit: 1, queue: 5, timeout: 0.1)
    Weft.run do
      holder = Weft.spawn { bulkhead.call { sleep 0.5 } }
      sleep 0.01
      time = elapsed { assert_raises(Weft::BulkheadFull) { bulkhead.call { flunk "ran without a slot" } } }
      assert_in_delta 0.1, time, 0.08
      assert_equal :timeout, bulkhead.acquire(timeout: 0)
      assert_equal 0, bulkhead.waiting
      holder.wait
    end
    assert_equal 0, bulkhead.active
  end

  def test_slots_go_to_waiters_in_arrival_order
    bulkhead = Weft::Bulkhead.new(limit: 1, queue: 10)
    order = []
    Weft.run do
      bulkhead.acquire
      waiters = Array.new(5) { |i| Weft.spawn { bulkhead.call { order << i; sleep 0.001 } } }
      sleep 0.01
      bulkhead.release
      late = Weft.spawn { bulkhead.call { order << :late } } # must not overtake the queue
      Weft.gather(waiters + [late])
    end
    assert_equal [0, 1, 2, 3, 4, :late], order
  end

  def test_a_cancelled_waiter_loses_no_slot
    bulkhead = Weft::Bulkhead.new(limit: 1, queue: 5)
    Weft.run do
      bulkhead.acquire
      first = Weft.spawn { bulkhead.call { :first } }
      second = Weft.spawn { bulkhead.call { :second } }
      sleep 0.01
      bulkhead.release # hands the slot to the first waiter ...
      first.cancel     # ... which is cancelled before it wakes
      assert_nil first.wait
      assert_equal :second, second.wait
    end
    assert_equal [0, 0], [bulkhead.active, bulkhead.waiting]
  end

  def test_shared_by_plain_threads
    bulkhead = Weft::Bulkhead.new(limit: 2, queue: 10)
    inside = 0
    peak = 0
    lock = Mutex.new
    Array.new(6) do
      Thread.new do
        bulkhead.call do
          lock.synchronize { inside += 1; peak = [peak, inside].max }
          sleep 0.05
          lock.synchronize { inside -= 1 }
        end
      end
    end.each(&:join)
    assert_equal 2, peak
    assert_equal 0, bulkhead.active
  end

  def test_waits_are_capped_by_the_callers_remaining_deadline
    bulkhead = Weft::Bulkhead.new(limit: 1, queue: 5, timeout: 5)
    bulkhead.acquire
    with_remaining(0.05) do
      time = elapsed { assert_equal :timeout, bulkhead.acquire }
      assert_operator time, :<, 1
    end
    with_remaining(0) { assert_equal :timeout, bulkhead.acquire }
  end

  def test_release_without_acquire_is_an_error
    assert_raises(Weft::Error) { Weft::Bulkhead.new(limit: 1).release }
  end

  def test_invalid_options_raise_argument_error
    [{ limit: 0 }, { limit: 1.5 }, { limit: nil }, { limit: 2, queue: -1 }, { limit: 2, timeout: -0.1 }].each do |options|
      assert_raises(ArgumentError, options.inspect) { Weft::Bulkhead.new(**options) }
    end
  end
end
