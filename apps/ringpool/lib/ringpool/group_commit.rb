# frozen_string_literal: true

module Ringpool
  # Stores the picks of every request waiting on one shard in one INSERT: group commit.
  #
  # At most `in_flight` INSERTs run at once. Picks submitted while they run wait, together, for
  # the next one; so under light load a request's INSERT leaves at once (on the reactor's next
  # turn, which also gathers the requests of the same turn), and under heavy load statements
  # grow instead of multiplying. PostgreSQL then pays its per-statement cost (a transaction, a
  # plan, a round trip) once per group instead of once per request, and fewer backends insert
  # into the same index pages at once.
  #
  # The INSERT runs in a task of its own that no request's deadline reaches: a request that
  # stops waiting (its deadline passed) leaves the statement to finish for the others, within
  # `timeout` seconds.
  class GroupCommit
    # The picks of one INSERT, and the promise of what it stored.
    Group = Struct.new(:rows, :promise)

    # @param store [Store]
    # @param in_flight [Integer] INSERTs at once
    # @param timeout [Numeric] seconds an INSERT may take
    def initialize(store, in_flight:, timeout:)
      @store = store
      @in_flight = in_flight
      @timeout = timeout
      @open = nil
      @running = 0
      @starting = false
    end

    # Queues picks for the next INSERT.
    # @param rows [Array<(PoolState::Pick, String)>] each pick with its params as JSON text
    # @return [Weft::Promise] fulfilled with true when the INSERT stored every row (the usual
    #   case, told by the count alone), else with the keys of the rows it stored
    #   (`{[number, locked_from] => true}`: see Store#record); or rejected with its error
    def submit(rows)
      group = (@open ||= Group.new([], Weft::Promise.new))
      group.rows.concat(rows)
      if @running < @in_flight && !@starting
        @running += 1
        @starting = true
        Weft.spawn(detached: true, name: "ringpool group commit") { flush }
      end
      group.promise
    end

    private

    # Stores the open group, then the one that gathered meanwhile, until none is left.
    def flush
      @starting = false
      while (group = @open)
        @open = nil
        store(group)
      end
    ensure
      @running -= 1
    end

    def store(group)
      stored = Weft.timeout(@timeout) { @store.record(group.rows) }
      group.promise.fulfill(stored.size == group.rows.size || stored.to_h { |key| [key, true] })
    rescue StandardError => e
      group.promise.reject(e)
    ensure
      # Cancelled (the shard is stopping): its waiters learn it as storage trouble.
      group.promise.reject(IOError.new("the INSERT was cancelled")) if group.promise.pending?
    end
  end
end
