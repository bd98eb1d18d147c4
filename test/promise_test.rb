# frozen_string_literal: true

require_relative "test_helper"

class PromiseTest < Minitest::Test
  def test_many_tasks_wait_for_one_value
    values = Weft.run do
      promise = Weft::Promise.new
      waiters = Array.new(5) { Weft.spawn { promise.wait } }
      sleep 0.01
      assert promise.pending?
      promise.fulfill(:answer)
      waiters.map(&:wait)
    end
    assert_equal [:answer] * 5, values
  end

  def test_rejection_is_raised_in_every_waiter
    Weft.run do
      promise = Weft::Promise.new
      waiter = Weft.spawn { promise.wait }
      promise.reject(IOError.new("lost"))
      assert_raises(IOError) { waiter.wait }
      assert promise.rejected?
    end
  end

  def test_settled_from_a_thread
    value = Weft.run do
      promise = Weft::Promise.new
      Thread.new { sleep 0.01; promise.fulfill(7) }
      promise.wait(timeout: 1)
    end
    assert_equal 7, value
  end

  def test_wait_times_out
    Weft.run do
      assert_raises(Weft::TimeoutError) { Weft::Promise.new.wait(timeout: 0.01) }
    end
  end

  def test_settles_only_once
    promise = Weft::Promise.new.fulfill(1)
    assert promise.fulfilled?
    assert_raises(Weft::Error) { promise.fulfill(2) }
    assert_raises(ArgumentError) { Weft::Promise.new.reject("not an exception") }
    assert_equal 1, promise.wait
  end
end
