# frozen_string_literal: true

module Ringpool
  # What one shard has answered to public allocation requests, second by second, for the last
  # five minutes: requests, items answered with a number, overflows by reason, item errors, a
  # latency histogram, and per pool the items allocated. In memory only, in fixed space (one
  # slot per second of the window, reused); the dashboard (Dashboard) adds up every shard's
  # #snapshot.
  #
  # Latencies go into buckets 20% wide on a log scale (0.1 ms to about 10 minutes), so the
  # histograms of several shards and seconds add up exactly and any percentile of the sum is
  # known to within 20%.
  class Metrics
    WINDOW = 300
    # Pools are ranked over the last minute.
    POOL_WINDOW = 60
    BUCKET_BASE = 0.0001
    BUCKET_GROWTH = 1.2
    BUCKETS = 86

    # The upper bound, in milliseconds, of latency bucket `index`.
    # @param index [Integer]
    # @return [Float]
    def self.bucket_ms(index)
      BUCKET_BASE * (BUCKET_GROWTH**index) * 1000
    end

    # @param seconds [Float]
    # @return [Integer] the bucket a latency falls in
    def self.bucket(seconds)
      return 0 if seconds <= BUCKET_BASE
      Math.log(seconds / BUCKET_BASE, BUCKET_GROWTH).ceil.clamp(0, BUCKETS - 1)
    end

    # A percentile of a histogram.
    # @param histogram [Hash{Integer => Integer}] bucket => count
    # @param fraction [Float] 0.5 for the median
    # @return [Float, nil] the upper bound of the bucket it falls in, in ms; nil when empty
    def self.percentile(histogram, fraction)
      total = histogram.each_value.sum
      return nil if total.zero?
      rank = (total * fraction).ceil.clamp(1, total)
      seen = 0
      histogram.keys.sort.each do |index|
        seen += histogram[index]
        return bucket_ms(index).round(2) if seen >= rank
      end
    end

    # One second's counts.
    Second = Struct.new(:at, :requests, :items, :errors, :overflows, :latency, :pools) do
      # @param at [Integer] the second, by the Metrics clock (whole seconds since the epoch)
      # @return [Second] the second with nothing counted yet
      def self.empty(at)
        new(at, 0, 0, 0, Hash.new(0), Hash.new(0), Hash.new(0))
      end
    end

    # @param clock [#call] the current time in whole seconds since the epoch (every shard on a
    #   machine reads the same clock, so their seconds line up)
    def initialize(clock: -> { Process.clock_gettime(Process::CLOCK_REALTIME, :second) })
      @clock = clock
      @seconds = Array.new(WINDOW)
      @lock = Thread::Mutex.new
    end

    # @return [Integer] the current second, by this object's clock
    def now
      @clock.call
    end

    # Counts one answered public request.
    # @param results [Array<Result>] its items' answers
    # @param seconds [Float] how long it took
    # @return [void]
    def record(results, seconds)
      @lock.synchronize do
        second = current
        second.requests += 1
        second.latency[Metrics.bucket(seconds)] += 1
        results.each do |result|
          if result.kind == :error
            second.errors += 1
            next
          end
          second.items += 1
          second.overflows[result.reason] += 1 if result.overflow?
          second.pools[result.ring_pool] += 1
        end
      end
    end

    # The counts of the window, for JSON: seconds with something in them, oldest first, and the
    # items allocated per pool over the last POOL_WINDOW seconds.
    # @return [Hash]
    def snapshot
      now = @clock.call
      @lock.synchronize do
        live = @seconds.compact.select { |second| second.at > now - WINDOW }.sort_by(&:at)
        pools = Hash.new(0)
        live.each { |second| second.pools.each { |id, count| pools[id] += count } if second.at > now - POOL_WINDOW }
        {
          "at" => now,
          "seconds" => live.map do |second|
            { "at" => second.at, "requests" => second.requests, "items" => second.items, "errors" => second.errors,
              "overflows" => second.overflows.dup, "latency" => second.latency.dup }
          end,
          "pools" => pools
        }
      end
    end

    private

    # This second's slot, emptied first if it last held an older second.
    def current
      now = @clock.call
      slot = now % WINDOW
      second = @seconds[slot]
      second = @seconds[slot] = Second.empty(now) if second.nil? || second.at != now
      second
    end
  end
end
