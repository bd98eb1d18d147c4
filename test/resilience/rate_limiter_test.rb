# frozen_string_literal: true

require_relative "../test_helper"
require_relative "support/remaining"
require "weft/resilience"

class RateLimiterTest < Minitest::Test
  include Weft::Test::Remaining

  def elapsed
    started = Weft::Timers.now
    yield
    Weft::Timers.now - started
  end

  def test_rate_is_respected_over_a_second_among_tasks
    limiter = Weft::RateLimiter.new(rate: 50, burst: 1, timeout: nil)
    granted = 0
    Weft.run do
      stop = Weft::Timers.now + 1.0
      Weft.gather(Array.new(20) do
        Weft.spawn do
          while Weft::Timers.now < stop
            limiter.acquire
            granted += 1 if Weft::Timers.now <= stop
          end
        end
      end)
    end
    # 1 saved token + 50 a second; a loaded machine only lowers the count.
    assert_operator granted, :<=, 52
    assert_operator granted, :>=, 40
  end

  def test_rate_is_respected_among_threads
    limiter = Weft::RateLimiter.new(rate: 40, burst: 1, timeout: nil)
    granted = Queue.new
    time = elapsed { Array.new(4) { Thread.new { 10.times { limiter.acquire; granted << 1 } } }.each(&:join) }
    assert_equal 40, granted.size
    assert_operator time, :>=, 39 / 40.0 - 0.05 # 1 saved token, then 39 at 40/s
    assert_operator time, :<, 3
  end

  def test_burst_passes_at_once_then_limits
    limiter = Weft::RateLimiter.new(rate: 1, burst: 5)
    time = elapsed { assert_equal [true] * 5, Array.new(5) { limiter.try_acquire } }
    assert_operator time, :<, 0.1
    refute limiter.try_acquire
    assert_operator limiter.available, :<, 1
  end

  def test_default_burst_is_one_seconds_worth
    assert_equal 20, Weft::RateLimiter.new(rate: 20).burst
    assert_equal 1, Weft::RateLimiter.new(rate: 0.5).burst
    assert_equal 3, Weft::RateLimiter.new(rate: 2.5).burst
  end

  def test_a_wait_longer_than_the_timeout_is_refused_at_once
    limiter = Weft::RateLimiter.new(rate: 2, burst: 1)
    assert limiter.try_acquire
    time = elapsed { refute limiter.acquire(timeout: 0.1) } # the next token is 0.5 s away
    assert_operator time, :<, 0.05
    time = elapsed { assert limiter.acquire(timeout: 1) }
    assert_in_delta 0.5, time, 0.2
    assert_raises(Weft::RateLimited) { limiter.call { flunk "ran without a token" } }
  end

  def test_call_runs_the_block_with_a_token
    limiter = Weft::RateLimiter.new(rate: 1, burst: 1)
    assert_equal :ran, limiter.call { :ran }
    error = assert_raises(Weft::RateLimited) { limiter.call { flunk "ran without a token" } }
    assert_kind_of Weft::Rejected, error
  end

  def test_waiting_parks_only_the_fiber_and_serves_in_arrival_order
    limiter = Weft::RateLimiter.new(rate: 20, burst: 1, timeout: nil)
    order = []
    ticks = 0
    Weft.run do
      ticker = Weft.spawn { loop { ticks += 1; sleep 0.01 } }
      Weft.gather(Array.new(5) { |i| Weft.spawn { limiter.acquire; order << i } })
      ticker.cancel
    end
    assert_equal [0, 1, 2, 3, 4], order
    assert_operator ticks, :>=, 10 # the reactor went on while they waited ~0.2 s
  end

  def test_a_cancelled_waiter_gives_its_reserved_token_back
    limiter = Weft::RateLimiter.new(rate: 2, burst: 1, timeout: nil)
    Weft.run do
      limiter.acquire
      waiter = Weft.spawn { limiter.acquire }
      sleep 0.01
      assert_operator limiter.available, :<, -0.5 # reserved
      waiter.cancel
      waiter.wait
      assert_operator limiter.available, :>, 0
    end
  end

  def test_waits_are_capped_by_the_callers_remaining_deadline
    limiter = Weft::RateLimiter.new(rate: 2, burst: 1, timeout: 5)
    limiter.try_acquire
    with_remaining(0.1) do
      time = elapsed { refute limiter.acquire } # 0.5 s needed, 0.1 s left
      assert_operator time, :<, 0.05
    end
    with_remaining(nil) { assert limiter.acquire }
  end

  def test_invalid_options_raise_argument_error
    [{ rate: 0 }, { rate: -1 }, { rate: Float::INFINITY }, { rate: "5" }, { rate: 5, burst: 0 },
     { rate: 5, burst: 1.5 }, { rate: 5, timeout: -1 }].each do |options|
      assert_raises(ArgumentError, options.inspect) { Weft::RateLimiter.new(**options) }
    end
    assert_raises(ArgumentError) { Weft::RateLimiter.new(rate: 1).acquire(timeout: -1) }
  end
end
