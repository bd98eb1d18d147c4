# frozen_string_literal: true

module Weft
  class CircuitBreaker
    # The recent outcomes a closed circuit breaker judges: how many calls, how many of them
    # failed, how many were slow. Two kinds, as in resilience4j: the last N calls (CountWindow),
    # or the calls of the last N seconds (TimeWindow).
    #
    # An outcome is a small Integer, a bit set of FAILED and SLOW, so recording one allocates
    # nothing. Windows are not thread-safe: the breaker calls them under its mutex.
    # @api private
    module SlidingWindow
      FAILED = 1
      SLOW = 2

      # Builds the window for a breaker's options.
      # @return [CountWindow, TimeWindow]
      def self.build(calls:, seconds:)
        raise ArgumentError, "give window_calls: or window_seconds:, not both" if calls && seconds
        seconds ? TimeWindow.new(seconds) : CountWindow.new(calls)
      end
    end

    # The outcomes of the last `size` calls, in a ring.
    # @api private
    class CountWindow
      # @return [Integer] calls, failed calls and slow calls in the window
      attr_reader :calls, :failures, :slow

      # @return [Integer] how many calls the window holds at most
      attr_reader :size

      # @param size [Integer] calls the window holds, >= 1 (the breaker's window_calls)
      def initialize(size)
        unless size.is_a?(Integer) && size >= 1
          raise ArgumentError, "window_calls must be an Integer >= 1 (got #{size.inspect})"
        end
        @size = size
        @outcomes = Array.new(size)
        clear
      end

      # Adds one outcome, pushing out the oldest once the ring is full.
      # @param outcome [Integer] a bit set of SlidingWindow::FAILED and SlidingWindow::SLOW
      def record(outcome, _now)
        index = @next
        old = @outcomes[index]
        @outcomes[index] = outcome
        @next = index + 1 == @size ? 0 : index + 1
        if old.nil?
          @calls += 1
        elsif old != 0
          @failures -= 1 if old.anybits?(SlidingWindow::FAILED)
          @slow -= 1 if old.anybits?(SlidingWindow::SLOW)
        end
        return if outcome == 0 # the common case, a quick success, ends here
        @failures += 1 if outcome.anybits?(SlidingWindow::FAILED)
        @slow += 1 if outcome.anybits?(SlidingWindow::SLOW)
      end

      # Nothing ages out of a count window.
      def expire(_now); end

      # Forgets every outcome.
      def clear
        @outcomes.fill(nil)
        @next = 0
        @calls = 0
        @failures = 0
        @slow = 0
      end
    end

    # The outcomes of the last `seconds`, in ten buckets of a tenth each: an outcome leaves the
    # window within a tenth of the window after it has aged past it, and the bookkeeping per
    # call stays constant however busy the breaker is.
    # @api private
    class TimeWindow
      BUCKETS = 10

      # @return [Integer] calls, failed calls and slow calls in the window
      attr_reader :calls, :failures, :slow

      # @return [Float] the window's length in seconds
      attr_reader :seconds

      # @param seconds [Numeric] the window's length, > 0 (the breaker's window_seconds)
      def initialize(seconds)
        unless seconds.is_a?(Numeric) && seconds.positive? && seconds.finite?
          raise ArgumentError, "window_seconds must be a positive number of seconds (got #{seconds.inspect})"
        end
        @seconds = seconds.to_f
        @width = @seconds / BUCKETS
        @bucket_calls = Array.new(BUCKETS, 0)
        @bucket_failures = Array.new(BUCKETS, 0)
        @bucket_slow = Array.new(BUCKETS, 0)
        clear
      end

      # Adds one outcome at monotonic time `now`.
      # @param outcome [Integer] a bit set of SlidingWindow::FAILED and SlidingWindow::SLOW
      def record(outcome, now)
        index = expire(now) % BUCKETS
        @bucket_calls[index] += 1
        @calls += 1
        if outcome.anybits?(SlidingWindow::FAILED)
          @bucket_failures[index] += 1
          @failures += 1
        end
        return unless outcome.anybits?(SlidingWindow::SLOW)
        @bucket_slow[index] += 1
        @slow += 1
      end

      # Drops the buckets that have aged out by `now`.
      # @return [Integer] the time slice `now` falls in
      def expire(now)
        slice = (now / @width).floor
        newest = @newest
        # Threads may record a moment out of order; an older instant goes into the newest bucket.
        return newest if newest && slice <= newest

        if newest.nil? || slice - newest >= BUCKETS
          clear
        else
          while newest < slice
            newest += 1
            drop(newest % BUCKETS)
          end
        end
        @newest = slice
      end

      # How long the window's trouble has lasted: the seconds from the start of the oldest
      # tenth that holds a failed or slow call to `now` (0.0 when it holds none). Call it after
      # #record or #expire at `now`, which drop the tenths that aged out.
      # @return [Float]
      def troubled_for(now)
        oldest = @newest - (BUCKETS - 1)
        oldest.upto(@newest) do |slice|
          index = slice % BUCKETS
          return now - (slice * @width) if @bucket_failures[index].positive? || @bucket_slow[index].positive?
        end
        0.0
      end

      # Forgets every outcome.
      def clear
        @bucket_calls.fill(0)
        @bucket_failures.fill(0)
        @bucket_slow.fill(0)
        @calls = 0
        @failures = 0
        @slow = 0
        @newest = nil
      end

      private

      def drop(index)
        @calls -= @bucket_calls[index]
        @failures -= @bucket_failures[index]
        @slow -= @bucket_slow[index]
        @bucket_calls[index] = 0
        @bucket_failures[index] = 0
        @bucket_slow[index] = 0
      end
    end
  end
end
