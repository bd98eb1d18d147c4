# frozen_string_literal: true

require_relative "pool_state"
require_relative "result"
require_relative "group_commit"

module Ringpool
  # Hands out numbers from the pools this shard owns, and stores them before answering.
  #
  # For one request: pick a number per item in memory (O(1) each), store the picks (in one
  # statement with those of the other requests waiting: GroupCommit), answer. Picks the table refuses (the exclusion constraint: another process
  # handed the number out meanwhile, so this shard's state was wrong) are retried after
  # reloading their pools from the table. When PostgreSQL cannot be reached the picks are undone
  # and the items get the overflow number with reason `storage_unavailable`: a tracked number is
  # never handed out unless it is stored.
  class Allocator
    # Errors that mean "the allocations could not be stored": PostgreSQL down or restarting,
    # pool exhausted or closed, the request's deadline passed.
    STORAGE_ERRORS = [PG::Error, Weft::Error, Timeout::Error, IOError, SystemCallError].freeze

    # Rounds of reload-and-pick-again for picks the table refused.
    ATTEMPTS = 3

    # Seconds an INSERT may go on after its request's deadline passed (see #store).
    LATE_STORE_TIMEOUT = 5

    # INSERTs of one shard at once (GroupCommit). With one, PostgreSQL holds at most one
    # statement per shard in its queue, so an overloaded database makes the groups bigger rather
    # than the queue longer; apps/ringpool/bench/pg_cost.rb measured 2 or more within 5% of one's
    # CPU per allocation.
    INSERTS_IN_FLIGHT = 1

    # One item to allocate: its pool and params (JSON text).
    Item = Struct.new(:pool, :params)

    # Seconds a state released with `retain: true` may be taken back by #readopt. Long enough
    # for a PostgreSQL restart and the claims after it; short enough that a pool some other
    # shard served unnoticed in between (see #readopt) is not served from an old state for long.
    RETAIN_SECONDS = 60

    # @param store [Store]
    def initialize(store)
      @store = store
      @group_commit = GroupCommit.new(store, in_flight: INSERTS_IN_FLIGHT, timeout: LATE_STORE_TIMEOUT)
      @states = {}
      @retained = {}
    end

    # Takes over a pool: from now on this shard hands out its numbers.
    # @param pool [RingPool]
    # @param numbers [Array<(String, Integer)>] from Store#numbers_with_lockouts
    # @return [void]
    def adopt(pool, numbers)
      @retained.delete(pool.id)
      @states[pool.id] = PoolState.new(pool, numbers)
    end

    # Stops handing out a pool's numbers (ownership lost or given away).
    # @param retain [Boolean] keep the state for #readopt: right when the pool was lost with
    #   the lock session (PostgreSQL restarted, the session failed) and no other shard is known
    #   to serve it; wrong when it was given away or another shard holds it
    # @return [void]
    def release(id, retain: false)
      state = @states.delete(id)
      @retained[id] = [state, Process.clock_gettime(Process::CLOCK_MONOTONIC)] if retain && state
    end

    # Takes a pool over again with the state it was released with (see #release), instead of
    # loading its lockouts from the table: after a PostgreSQL restart that load, for every
    # pool of every shard at once, is what keeps the service degraded (bench/results/
    # ringpool-faults.md). The state is as good as the table's as long as no other shard handed
    # out the pool's numbers in between, which Ownership checks at every tick (#forget). If one
    # did anyway (it held the pool between two ticks), the state is behind the table only by
    # lockouts it lacks: a number it believes free is refused by the exclusion constraint and
    # the pool reloaded (#allocate). It never believes a number locked that is free.
    # @param pool [RingPool] as the catalog has it now
    # @return [Boolean] whether the pool was taken over (false: load it and #adopt)
    def readopt(pool)
      state, released_at = @retained.delete(pool.id)
      return false if state.nil? || state.pool != pool
      return false if Process.clock_gettime(Process::CLOCK_MONOTONIC) - released_at > RETAIN_SECONDS
      @states[pool.id] = state
      true
    end

    # @param id [Integer]
    # @return [Boolean] whether a state released with `retain: true` is kept for the pool
    def retained?(id)
      @retained.key?(id)
    end

    # Drops the retained states of pools for which the block is true (another shard holds
    # them now) or whose time is up.
    # @yieldparam id [Integer]
    # @return [void]
    def forget
      oldest = Process.clock_gettime(Process::CLOCK_MONOTONIC) - RETAIN_SECONDS
      @retained.delete_if { |id, (_state, released_at)| released_at < oldest || yield(id) }
    end

    # @return [Boolean] whether this shard owns the pool
    def owns?(id)
      @states.key?(id)
    end

    # @return [Array<Integer>]
    def owned_ids
      @states.keys
    end

    # @return [PoolState, nil]
    def state(id)
      @states[id]
    end

    # Allocates one request's items. Never raises for storage trouble: those items get
    # overflow numbers.
    # @param items [Array<Item>]
    # @return [Array<Result>] in item order
    def allocate(items)
      results = Array.new(items.size)
      pending = pick(items, items.each_index.to_a, results)
      attempt = 1
      until pending.empty?
        refused = store(items, pending, results)
        break if refused.empty?
        if attempt == ATTEMPTS
          # Refused again and again: the pool is being handed out by someone else too (two
          # owners for a moment, see Ownership). Say so rather than keep the caller waiting.
          refused.each { |index, _pick| results[index] = Result.overflow(items[index].pool, "shard_unavailable") }
          break
        end
        attempt += 1
        reload(refused.map { |_index, chosen| chosen.state }.uniq)
        pending = pick(items, refused.map(&:first), results)
      end
      results
    end

    private

    # @return [Array<(Integer, PoolState::Pick)>] the picks made, by item index
    def pick(items, indexes, results)
      now = Clock.now
      indexes.filter_map do |index|
        pool = items[index].pool
        state = @states[pool.id]
        if state.nil?
          results[index] = Result.not_owner(pool.id)
          next
        end
        chosen = state.pick(now)
        if chosen
          [index, chosen]
        else
          results[index] = Result.overflow(pool, "exhausted")
          nil
        end
      end
    end

    # Stores the picks; fills in the results of those stored or failed.
    #
    # The INSERT (GroupCommit's, shared with other requests) runs in a task of its own that the
    # request's deadline does not reach: when the deadline passes first, the items are answered
    # with the overflow number at once and the INSERT is left to finish (within
    # LATE_STORE_TIMEOUT); what it stored stays locked out (unused: a wasted lockout, never a
    # double allocation), what it did not is undone. Picks still waiting for their INSERT to
    # start when the deadline passes are left out of it (GroupCommit) and undone the same way. Cancelling it instead would make
    # PostgreSQL throw the work away and cost a cancel request, and under load that feeds on
    # itself: measured, 50 ms deadlines on a busy machine cut a shard from ~120 to ~30
    # requests/s when statements were cancelled.
    # @return [Array<(Integer, PoolState::Pick)>] the picks the table refused
    def store(items, pending, results)
      commit = @group_commit.submit(pending.map { |index, chosen| [chosen, items[index].params] })
      stored = begin
        commit.wait
      rescue Weft::DeadlineExceeded
        # Left out of its INSERT (see GroupCommit): nothing of it was stored.
        return give_up(items, pending, results, undo: true) if commit.rejected?
        Weft.spawn(detached: true, name: "ringpool late insert") { settle_late(commit, pending) }
        return give_up(items, pending, results, undo: false)
      rescue *STORAGE_ERRORS
        return give_up(items, pending, results, undo: true)
      end
      pending.reject do |index, chosen|
        next false unless stored == true || stored[key(chosen)]
        results[index] = Result.tracked(chosen.state.pool.id, chosen.number, chosen.locked_until)
      end
    end

    # How Store#record names a stored row.
    def key(pick)
      [pick.number, pick.locked_from]
    end

    # The items could not be stored in time: the overflow number.
    # @return [Array] nothing left to retry
    def give_up(items, pending, results, undo:)
      pending.reverse_each do |index, chosen|
        chosen.state.undo(chosen) if undo
        results[index] = Result.overflow(items[index].pool, "storage_unavailable")
      end
      []
    end

    # After the request answered without them: undoes the picks the late INSERT did not store.
    def settle_late(commit, pending)
      stored = begin
        commit.wait
      rescue *STORAGE_ERRORS
        {}
      end
      return if stored == true
      pending.reverse_each { |_index, chosen| chosen.state.undo(chosen) unless stored[key(chosen)] }
    end

    # Rebuilds pools' states from the table (it holds allocations this state lacked). A pool
    # reloaded meanwhile by another request, or no longer owned, is left alone.
    def reload(states)
      fresh = @store.numbers_with_lockouts(states.map { |state| state.pool.id })
      states.each do |state|
        id = state.pool.id
        @states[id] = PoolState.new(state.pool, fresh.fetch(id)) if @states[id].equal?(state)
      end
    rescue *STORAGE_ERRORS
      nil # the next attempt picks from the old state, and storing tells again
    end
  end
end
