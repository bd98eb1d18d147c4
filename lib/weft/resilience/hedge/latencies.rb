# frozen_string_literal: true

module Weft
  class Hedge
    # A percentile of the latencies of a hedge policy's recent successful attempts: what
    # `after: :p95` waits before hedging. Holds the last `size` samples in a ring; the
    # percentile is recomputed (a sort of at most `size` floats) once a tenth of the ring has
    # been replaced, not on every call. Thread-safe: a mutex guards the ring and is never held
    # across a wait.
    # @api private
    class Latencies
      # @return [Float] the percentile, e.g. 95.0
      attr_reader :percent

      # @param percent [Float] which percentile, above 0 and below 100
      # @param size [Integer] samples kept
      # @param minimum [Integer] samples needed before #percentile answers
      def initialize(percent, size, minimum)
        @percent = percent
        @size = size
        @minimum = minimum
        @samples = []
        @next = 0
        @refresh_every = [size / 10, 1].max
        @fresh = 0
        @value = nil
        @lock = Thread::Mutex.new
      end

      # @param seconds [Float] one attempt's latency
      # @return [void]
      def record(seconds)
        @lock.synchronize do
          if @samples.size < @size
            @samples << seconds
          else
            @samples[@next] = seconds
            @next = (@next + 1) % @size
          end
          @fresh += 1
        end
        nil
      end

      # @return [Float, nil] the smallest sample that `percent`% of the samples do not exceed
      #   (nearest rank), or nil until `minimum` samples have been recorded
      def percentile
        @lock.synchronize do
          return nil if @samples.size < @minimum
          if @value.nil? || @fresh >= @refresh_every
            @fresh = 0
            sorted = @samples.sort
            @value = sorted[((@percent / 100.0) * sorted.size).ceil.clamp(1, sorted.size) - 1]
          end
          @value
        end
      end

      # @return [Integer] samples held
      def count
        @lock.synchronize { @samples.size }
      end
    end
  end
end
