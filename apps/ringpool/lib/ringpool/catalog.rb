# frozen_string_literal: true

require "json"
require "fileutils"

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
  #
  # With a snapshot file (the shards' socket folder), each refresh that learnt new pools writes
  # the catalog there, and #load reads it: a shard started while PostgreSQL is unreachable (a
  # worker replaced during an outage) still knows every pool's overflow number as of the last
  # snapshot any shard wrote, instead of answering that it cannot look the pool up. Pools never
  # change, so an older snapshot is never wrong, only short of the newest pools.
  class Catalog
    SETTLE = 60

    # @param store [Store]
    # @param snapshot [String, nil] the snapshot file
    # @param clock [#call] monotonic seconds
    def initialize(store, snapshot: nil, clock: -> { Process.clock_gettime(Process::CLOCK_MONOTONIC) })
      @store = store
      @snapshot = snapshot
      @clock = clock
      @pools = {}
      @unsaved = false
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
      known = @pools[pool.id]
      # The object held already stays when the pool is the same: a refresh reads every pool
      # created in the last SETTLE seconds again, each tick, and new copies of all of them would
      # live long enough to be promoted, then die old, making major GCs.
      return known if known == pool
      @unsaved = true
      @pools[pool.id] = pool
    end

    # Reads the pools created since the last settled refresh (see the class comment).
    # @return [void]
    # @raise what the store raises (PostgreSQL unreachable...)
    def refresh
      now = @clock.call
      @store.pools(after: @marks.first.last).each do |pool|
        # PostgreSQL's answer replaces what a snapshot said (of another database, say).
        add(pool)
        @highest = pool.id if pool.id > @highest
      end
      @marks << [now, @highest]
      @marks.shift while @marks.size > 1 && @marks[1].first <= now - SETTLE
      save if @unsaved
    end

    # Adds the pools of the snapshot file, if there is one and it can be read (a bad one is
    # ignored: PostgreSQL has the truth, and the next refresh replaces what the file said).
    # @return [Integer] pools added
    def load_snapshot
      return 0 unless @snapshot && File.exist?(@snapshot)
      pools = JSON.parse(File.read(@snapshot)).map do |id, overflow, lockout|
        RingPool.new(id: Integer(id), overflow_number: overflow.to_s, lockout_seconds: Integer(lockout))
      end
      added = pools.count { |pool| @pools.key?(pool.id) ? false : add(pool) }
      @unsaved = false # nothing here that the file does not have
      added
    rescue JSON::ParserError, TypeError, ArgumentError, NoMethodError, SystemCallError
      0
    end

    # Looks up the pools among `ids` not known yet (created on another shard a moment ago).
    # @return [void]
    # @raise what the store raises
    def resolve(ids)
      missing = ids.uniq.reject { |id| @pools.key?(id) }
      @store.pools(ids: missing).each { |pool| add(pool) } unless missing.empty?
    end

    private

    # Writes the snapshot: to a file of this process's, then renamed over the old one, so that a
    # reader never sees half a file whichever shard wrote last.
    def save
      return unless @snapshot
      FileUtils.mkdir_p(File.dirname(@snapshot))
      partial = "#{@snapshot}.#{Process.pid}"
      File.write(partial, JSON.generate(@pools.each_value.map { |pool| [pool.id, pool.overflow_number, pool.lockout_seconds] }))
      File.rename(partial, @snapshot)
      @unsaved = false
    rescue SystemCallError => e
      Weft.logger.warn("ringpool: could not write the catalog snapshot #{@snapshot}: #{e.message}")
    end
  end
end
