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
  # `timeout` seconds. But the picks of a request whose deadline passed before its group's
  # INSERT started are left out of it: that request has answered with overflow numbers
  # already, so storing them would only lock the numbers out for nothing, and under overload
  # it made PostgreSQL's backlog feed on itself (a group waiting behind a 1 s INSERT held a
  # second's worth of requests, all answered already, whose INSERT took longer still).
  #
  # Picks submitted when their deadline has passed already are refused at once. That happens
  # when the request's DeadlineExceeded was rescued before it got here (a lookup in PostgreSQL
  # that ran out of time, say): Weft raises it once per deadline, so no timer was left to end the
  # wait for the promise, and the request waited for the INSERT in flight to end before being
  # left out of the next one, answering up to an INSERT's time past its deadline.
  class GroupCommit
    # The picks of one INSERT: each submission's rows, the promise of what it stored and the
    # monotonic time its request stops waiting (nil: never).
    Group = Struct.new(:submissions)
    # One request's picks in a group: its rows, the promise it waits on and its deadline.
    Submission = Struct.new(:rows, :promise, :deadline)
    # Why picks were left out.
    LATE = "the deadline passed before the INSERT started"

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

    # Queues picks for the next INSERT, under the caller's deadline (Weft.remaining).
    # @param rows [Array<(PoolState::Pick, String)>] each pick with its params as JSON text
    # @return [Weft::Promise] fulfilled with true when the INSERT stored every row (the usual
    #   case, told by the count alone), else with the keys of the rows it stored
    #   (`{[number, locked_from] => true}`: see Store#record); or rejected with its error, or
    #   with Weft::DeadlineExceeded when the deadline passed before the INSERT started (nothing
    #   of it stored), at once when it had passed before this call
    def submit(rows)
      remaining = Weft.remaining
      return Weft::Promise.new.reject(Weft::DeadlineExceeded.new(LATE)) if remaining&.zero?
      submission = Submission.new(rows, Weft::Promise.new, remaining && Weft::Timers.now + remaining)
      (@open ||= Group.new([])).submissions << submission
      if @running < @in_flight && !@starting
        @running += 1
        @starting = true
        Weft.spawn(detached: true, name: "ringpool group commit") { flush }
      end
      submission.promise
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
      now = Weft::Timers.now
      late, live = group.submissions.partition { |submission| submission.deadline && submission.deadline <= now }
      late.each { |submission| submission.promise.reject(Weft::DeadlineExceeded.new(LATE)) }
      return if live.empty?
      rows = live.size == 1 ? live.first.rows : live.flat_map(&:rows)
      stored = Weft.timeout(@timeout) { @store.record(rows) }
      outcome = stored == true || stored.to_h { |key| [key, true] }
      live.each { |submission| submission.promise.fulfill(outcome) }
    rescue StandardError => e
      live&.each { |submission| submission.promise.reject(e) if submission.promise.pending? }
    ensure
      # Cancelled (the shard is stopping): its waiters learn it as storage trouble.
      group.submissions.each do |submission|
        submission.promise.reject(IOError.new("the INSERT was cancelled")) if submission.promise.pending?
      end
    end
  end
end
