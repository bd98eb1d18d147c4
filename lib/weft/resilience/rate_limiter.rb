# frozen_string_literal: true

require_relative "errors"
require_relative "wait"
require_relative "../timers"

module Weft
  # A token bucket: `rate` tokens a second, up to `burst` saved up; each call takes one.
  #
  #   SHARD = Weft::RateLimiter.new(rate: 50, burst: 10)
  #   SHARD.call { shard.get("/pool/7") }        # Weft::RateLimited past 50/s (after a burst of 10)
  #   SHARD.acquire(timeout: 0.05) or overflow   # wait up to 50 ms for a token
  #
  # A caller that has to wait reserves the next token first and then sleeps until it is due, so
  # waiters are served in arrival order and nobody spins. A wait that could not end within the
  # timeout (or within the current Weft.deadline) is refused at once instead of slept through.
  # Sleeping parks only the calling fiber inside a Weft reactor and the thread outside one; one
  # limiter may be shared by both.
  class RateLimiter
    # @return [Float] tokens added per second
    attr_reader :rate
    # @return [Integer] tokens saved up at most
    attr_reader :burst
    # @return [Numeric, nil] how long #call and #acquire wait for a token by default (seconds)
    attr_reader :timeout

    # @param rate [Numeric] tokens per second, > 0
    # @param burst [Integer] bucket size (>= 1): how many calls may pass at once after a quiet
    #   spell; by default one second's worth
    # @param timeout [Numeric, nil] default wait for a token in seconds; 0 never waits, nil waits
    #   as long as it takes
    def initialize(rate:, burst: nil, timeout: 0)
      unless rate.is_a?(Numeric) && rate.positive? && rate.finite?
        raise ArgumentError, "rate must be a positive number of calls per second (got #{rate.inspect})"
      end
      burst ||= [rate.ceil, 1].max
      raise ArgumentError, "burst must be an Integer >= 1 (got #{burst.inspect})" unless burst.is_a?(Integer) && burst >= 1
      @rate = rate.to_f
      @burst = burst
      @timeout = Resilience::Wait.check(timeout)
      @tokens = burst.to_f
      @refilled_at = Timers.now
      @mutex = Thread::Mutex.new
    end

    # Takes a token, waiting for one up to `timeout` seconds.
    # @param timeout [Numeric, nil] seconds to wait at most (and never past Weft.remaining)
    # @return [Boolean] true with a token taken, false if none could be had in time
    def acquire(timeout: @timeout)
      limit = Resilience::Wait.limit(Resilience::Wait.check(timeout))
      wait = @mutex.synchronize do
        now = Timers.now
        refill(now)
        needed = (1.0 - @tokens) / @rate
        return false if needed > limit
        @tokens -= 1.0 # reserved now, even if it is only due later
        needed
      end
      return true unless wait.positive?
      begin
        sleep(wait)
      rescue Exception # rubocop:disable Lint/RescueException
        # Cancelled or past a deadline while waiting: hand the reservation back.
        @mutex.synchronize { @tokens += 1.0 }
        raise
      end
      true
    end

    # Takes a token if one is there now; never waits.
    # @return [Boolean]
    def try_acquire
      acquire(timeout: 0)
    end

    # Runs the block once a token is taken.
    # @param timeout [Numeric, nil] seconds to wait for a token at most (0: not at all; nil: as
    #   long as it takes, still bounded by the caller's deadline)
    # @raise [Weft::RateLimited] if no token could be had within `timeout`
    # @return the block's value
    def call(timeout: @timeout)
      raise RateLimited, "rate limit of #{@rate}/s reached" unless acquire(timeout: timeout)
      yield
    end

    # @return [Float] tokens in the bucket now; negative while callers wait for reserved ones
    def available
      @mutex.synchronize do
        refill(Timers.now)
        @tokens
      end
    end

    private

    def refill(now)
      @tokens = [@tokens + (now - @refilled_at) * @rate, @burst.to_f].min
      @refilled_at = now
    end
  end
end
