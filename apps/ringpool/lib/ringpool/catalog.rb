# frozen_string_literal: true

module Ringpool
  # Every pool's overflow number and lockout, for every shard: a shard must be able to answer
  # with a pool's overflow number when the pool's owner is slow or gone, without asking it.
  # Pools are never changed once created, so the catalog only grows: it is refreshed with the
  # pools created since (by id), and a request naming a pool not seen yet looks it up at once.
  #
  # Ids are handed out when a pool's INSERT runs, not when it commits, so pool 10 may become
  # visible after pool 11: a refresh that only asked for ids above the highest seen would miss
  # 10 for good (and no shard would claim it until a request named it). So each refresh asks
  # again for every id above the highest one seen SETTLE seconds ago, by when any transaction
  # that took a lower id has committed or rolled back.
  class Catalog
    SETTLE = 60

    # @param store [Store]
    # @param clock [#call] monotonic seconds
    def initialize(store, clock: -> { Process.clock_gettime(Process::CLOCK_MONOTONIC) })
      @store = store
      @clock = clock
      @pools = {}
      @highest = 0
      # [time, highest id seen by then], oldest first; the first is the settled one.
      @marks = [[-Float::INFINITY, 0]]
    end

    # @return [RingPool, nil]
    def [](id)
      @pools[id]
    end

    # @return [Integer] pools known
    def size
      @pools.size
    end

    # @return [Array<Integer>] the ids of the pools known
    def ids
      @pools.keys
    end

    # @param pool [RingPool]
    # @return [RingPool]
    def add(pool)
      @pools[pool.id] = pool
    end

    # Reads the pools created since the last settled refresh (see the class comment).
    # @return [void]
    # @raise what the store raises (PostgreSQL unreachable...)
    def refresh
      now = @clock.call
      @store.pools(after: @marks.first.last).each do |pool|
        add(pool) unless @pools.key?(pool.id)
        @highest = pool.id if pool.id > @highest
      end
      @marks << [now, @highest]
      @marks.shift while @marks.size > 1 && @marks[1].first <= now - SETTLE
    end

    # Looks up the pools among `ids` not known yet (created on another shard a moment ago).
    # @return [void]
    # @raise what the store raises
    def resolve(ids)
      missing = ids.uniq.reject { |id| @pools.key?(id) }
      @store.pools(ids: missing).each { |pool| add(pool) } unless missing.empty?
    end
  end
end
