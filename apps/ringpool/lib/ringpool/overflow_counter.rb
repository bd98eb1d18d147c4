# frozen_string_literal: true

module Ringpool
  # Counts the overflow numbers a shard hands out, in memory, and adds them to the table now and
  # then (Shard's maintenance loop) rather than in every request: the counters are statistics,
  # and a write per request for them would cost more than the allocations. Counts not yet
  # written are lost if the process dies (at most one interval's worth); counts that could not
  # be written (PostgreSQL down) are kept for the next try.
  class OverflowCounter
    def initialize
      @counts = Hash.new(0)
    end

    # @param result [Result] counted when it is an overflow
    # @return [void]
    def count(result)
      @counts[[result.ring_pool, result.reason]] += 1 if result.overflow?
    end

    # Writes the counts gathered so far. On failure they are merged back for the next flush.
    # @param store [Store]
    # @return [void]
    # @raise whatever the store raised
    def flush(store)
      counts = @counts
      return if counts.empty?
      @counts = Hash.new(0)
      begin
        store.add_overflows(counts)
      rescue StandardError, Weft::Cancelled
        counts.each { |key, value| @counts[key] += value }
        raise
      end
    end
  end
end
