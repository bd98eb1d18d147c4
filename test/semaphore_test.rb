# frozen_string_literal: true

require_relative "test_helper"

class SemaphoreTest < Minitest::Test
  def test_bounds_concurrency_among_tasks
    semaphore = Weft::Semaphore.new(3)
    inside = 0
    peak = 0
    elapsed = Weft::Timers.now
    Weft.run do
      Weft.gather(Array.new(9) do
        Weft.spawn do
          semaphore.synchronize do
            inside += 1
            peak = [peak, inside].max
            sleep 0.05
            inside -= 1
          end
        end
      end)
    end
    elapsed = Weft::Timers.now - elapsed
    assert_equal 3, peak
    assert_operator elapsed, :>=, 0.14 # three rounds of 50 ms
    assert_equal 0, semaphore.count
  end

  def test_acquire_times_out
    semaphore = Weft::Semaphore.new(1)
    Weft.run do
      assert semaphore.acquire
      assert semaphore.blocking?
      refute Weft.spawn { semaphore.acquire(timeout: 0.02) }.wait
      assert_raises(Weft::TimeoutError) { semaphore.synchronize(timeout: 0.01) {} }
      semaphore.release
      refute semaphore.blocking?
    end
  end

  def test_shared_between_threads_and_tasks
    semaphore = Weft::Semaphore.new(1)
    order = []
    held = Thread::Queue.new
    thread = Thread.new { semaphore.synchronize { held << true; sleep 0.05; order << :thread } }
    held.pop # the thread holds the permit before the task asks for it
    Weft.run { semaphore.synchronize { order << :task } }
    thread.join
    assert_equal %i[thread task], order
  end

  def test_a_cancelled_waiter_does_not_leak_a_permit
    semaphore = Weft::Semaphore.new(1)
    Weft.run do
      semaphore.acquire
      waiter = Weft.spawn { semaphore.synchronize { :never } }
      sleep 0.01
      assert_equal 1, semaphore.waiting
      waiter.cancel
      waiter.wait
      semaphore.release
      assert_equal 0, semaphore.count
      assert_equal 0, semaphore.waiting
      assert_equal :free, semaphore.synchronize { :free }
    end
  end

  def test_invalid_use
    assert_raises(ArgumentError) { Weft::Semaphore.new(0) }
    assert_raises(Weft::Error) { Weft::Semaphore.new(1).release }
  end
end
