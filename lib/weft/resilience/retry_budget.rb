# frozen_string_literal: true

require_relative "../timers"

module Weft
  # A cap on retries as a share of calls, so that retrying cannot multiply the load on a
  # dependency that is already failing. Over any sliding `window` of seconds, at most
  #
  #   ratio × calls + min_per_second × window
  #
  # retries are allowed: with the defaults, one retry for every five calls, plus a reserve of 10
  # a second so that a service with little traffic can still retry. During an outage every
  # call fails, but the dependency sees at most 1.2 times its normal traffic, instead of the
  # `attempts` times it would see if every failure retried.
  #
  #   budget = Weft::RetryBudget.new(ratio: 0.2)
  #   budget.deposit           # a call was made
  #   budget.withdraw          # => true: a retry may go ahead (and is counted)
  #
  # Share one budget between every caller of a dependency (Weft::Retry and Weft::Hedge take one
  # as `budget:`). It is thread-safe: a mutex guards two arrays of counters and is never held
  # across a wait. Counting is per tenth of the window, so a call leaves the window within a
  # tenth of the window after it has aged out of it.
  class RetryBudget
    BUCKETS = 10
    private_constant :BUCKETS

    # @return [Float] retries allowed per call
    attr_reader :ratio
    # @return [Numeric] retries allowed per second whatever the traffic
    attr_reader :min_per_second
    # @return [Float] the sliding window, in seconds
    attr_reader :window

    # @return [RetryBudget] the process-wide budget Weft.retry uses when given none
    def self.default
      DEFAULT
    end

    # @param ratio [Numeric] retries per call, 0..1
    # @param min_per_second [Numeric] retries per second allowed even without calls (>= 0)
    # @param window [Numeric] seconds over which calls and retries are counted (> 0)
    # @raise [ArgumentError] for values outside those ranges
    def initialize(ratio: 0.2, min_per_second: 10, window: 10)
      unless ratio.is_a?(Numeric) && ratio.real? && ratio >= 0 && ratio <= 1
        raise ArgumentError, "ratio must be a number from 0 to 1 (got #{ratio.inspect})"
      end
      unless min_per_second.is_a?(Numeric) && min_per_second.real? && min_per_second.finite? && min_per_second >= 0
        raise ArgumentError, "min_per_second must be a finite number >= 0 (got #{min_per_second.inspect})"
      end
      unless window.is_a?(Numeric) && window.real? && window.finite? && window.positive?
        raise ArgumentError, "window must be a finite number of seconds > 0 (got #{window.inspect})"
      end
      @ratio = ratio.to_f
      @min_per_second = min_per_second
      @window = window.to_f
      @reserve = min_per_second * @window
      @slice = @window / BUCKETS
      @calls = Array.new(BUCKETS, 0)
      @retries = Array.new(BUCKETS, 0)
      @newest = nil # the time slice the newest bucket holds
      @lock = Thread::Mutex.new
    end

    # Counts a call (a first attempt).
    # @return [void]
    def deposit
      @lock.synchronize { @calls[advance(Timers.now)] += 1 }
      nil
    end

    # Takes one retry from the budget if one is left.
    # @return [Boolean] whether the retry may go ahead; true counts it
    def withdraw
      @lock.synchronize do
        bucket = advance(Timers.now)
        return false if @retries.sum >= allowance
        @retries[bucket] += 1
        true
      end
    end

    # @return [Integer] retries the budget would allow right now
    def available
      @lock.synchronize do
        advance(Timers.now)
        [allowance.floor - @retries.sum, 0].max
      end
    end

    # @return [Integer] calls counted in the window
    def calls
      @lock.synchronize do
        advance(Timers.now)
        @calls.sum
      end
    end

    # @return [Integer] retries counted in the window
    def retries
      @lock.synchronize do
        advance(Timers.now)
        @retries.sum
      end
    end

    # @return [String] the budget's settings, for logs and the console
    def inspect
      "#<#{self.class.name} ratio=#{@ratio} min_per_second=#{@min_per_second} window=#{@window}s>"
    end

    private

    def allowance
      @ratio * @calls.sum + @reserve
    end

    # Empties the buckets that have aged out by `now`; returns the index of the current one.
    def advance(now)
      slice = (now / @slice).floor
      newest = @newest
      if newest.nil? || slice - newest >= BUCKETS
        @calls.fill(0)
        @retries.fill(0)
      elsif slice > newest
        (newest + 1..slice).each do |fresh|
          @calls[fresh % BUCKETS] = 0
          @retries[fresh % BUCKETS] = 0
        end
      else
        # Another thread read the clock a moment later and got here first: count in its bucket.
        slice = newest
      end
      @newest = slice
      slice % BUCKETS
    end

    DEFAULT = new
    private_constant :DEFAULT
  end
end
