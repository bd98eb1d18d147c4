# frozen_string_literal: true

module Ringpool
  # Every pool's overflow number and lockout, for every shard: a shard must be able to answer
  # with a pool's overflow number when the pool's owner is slow or gone, without asking it.
  # Pools are never changed once created, so the catalog only grows: it is refreshed with the
  # pools created since (by id), and a request naming a pool not seen yet looks it up at once.
  class Catalog
    # @param store [Store]
    def initialize(store)
      @store = store
      @pools = {}
      @last_id = 0
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

    # Reads the pools created since the last refresh.
    # @return [void]
    # @raise what the store raises (PostgreSQL unreachable...)
    def refresh
      @store.pools(after: @last_id).each do |pool|
        add(pool)
        @last_id = pool.id if pool.id > @last_id
      end
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
