# frozen_string_literal: true

require "io/wait"
require "socket"
require "pg"
require_relative "errors"
require_relative "request"
require_relative "result_reader"
require_relative "background"
require_relative "server_time"
require_relative "trace"
require_relative "../timers"
require_relative "../deadline"

module Weft
  module Postgres
    # Drives one shared connection in libpq pipeline mode.
    #
    # Callers #submit a statement (buffered by libpq, without waiting for earlier answers) and
    # then #await its outcome. Under Weft the statements submitted during one turn of the reactor
    # go out as one segment: one write, one sync point after the last of them (while the
    # reactor's turns are short, those a reader sends inside the reactor's poll wait for the
    # next turn's: #hold_back). PostgreSQL answers a segment in one write too, and runs it as
    # one implicit transaction, so one sync per statement (which the server commits and flushes
    # separately) would cost the server and this process several times as much per statement.
    # Elsewhere (plain threads) every statement is a segment of its own.
    #
    # A statement is settled when its segment's sync point comes back: only then is it
    # committed. When a statement of a segment fails, PostgreSQL rolls the segment back and
    # skips the statements after it (pipeline abort), so the failure would reach statements of
    # other callers. Those are sent again instead (they had no effect; see #settle_segment), and
    # only the failing statement's caller gets the error. An error that comes from sharing a
    # transaction with others (a deadlock, a lock timeout, a statement that cannot run in a
    # transaction block) is not the statement's own: it is sent again in a segment of its own.
    #
    # A statement whose text the connection has seen before goes as a named prepared statement
    # (PreparedStatements): Bind/Execute of its name, after its Parse the first time, in the same
    # segment, and after the DEALLOCATEs of statements evicted or dropped. Those go before it on
    # its behalf (its prelude, Request#prelude) and their results are read first, in order: the
    # table learns from them whether the statement exists (a named statement, and a DEALLOCATE,
    # outlive the rollback of their segment; one skipped after an earlier failure did nothing).
    # A prelude that failed rolls the segment back like any failing statement; its statement is
    # sent again unnamed, and so is one whose named statement is gone (26000) or no longer fits
    # the schema (0A000): the caller sees neither (#retry?).
    #
    # There is no background reader. Whichever waiter finds nobody reading becomes the reader:
    # it reads results in order, settles the requests of each segment at its sync point and wakes
    # their waiters, and when its own request is settled (or it is cancelled) it hands the role to the
    # next waiter. A connection nobody waits on is not read at all, so a pool never keeps a
    # reactor alive.
    #
    # A caller that leaves before its statement is settled (its deadline passed, its task was
    # cancelled) abandons it: the result is thrown away when it arrives, and once the statement
    # is in the segment the server executes the server is asked to cancel it, off the caller's
    # path (see #cancel_abandoned). PostgreSQL cancels whatever the connection runs when the
    # request lands, which may be another caller's statement; so every statement in flight
    # meanwhile is marked exposed, and an exposed statement that comes back cancelled is sent
    # again instead of failing (its segment's transaction was rolled back, so it runs once in
    # effect). PostgreSQL drops a cancel request that lands between statements
    # (it clears a pending cancel before each protocol message), so statements sent after the
    # request was delivered are safe.
    #
    # Everything here runs under the pool's lock; the lock is released only while waiting on
    # the socket or on a condition variable.
    class Pipeline
      # Seconds a cancelled statement may take to come back after the server was asked to
      # cancel it; past that the connection is given up.
      CANCEL_GRACE = 2.0
      # Seconds after which a cancel request that had no effect is sent again: PostgreSQL drops
      # one that lands between two protocol messages of the statement (Parse, Bind, Execute).
      CANCEL_REPEAT = 0.5
      # SQLSTATE query_canceled: a cancel request (or statement_timeout) ended the statement.
      QUERY_CANCELED = "57014"
      # Result statuses of a statement that ran to its end.
      SUCCEEDED = ResultReader::SUCCEEDED
      # What takes the results libpq has complete (C where it can, see ResultReader).
      READER = ResultReader::READER
      # What sends a named statement without parameters (C where it can, see ResultReader).
      SENDER = ResultReader::SENDER
      # SQLSTATEs (or their classes) of errors a statement meets only because its segment ran
      # as one transaction with other callers' statements: transaction rollback (deadlock,
      # serialization failure), invalid transaction state ("cannot run inside a transaction
      # block" or "... within a pipeline", e.g. VACUUM), lock not available (locks held until
      # the segment ends). Such a statement is sent again in a segment of its own.
      SHARING_ERRORS = %w[40 25 55P03].freeze
      # libpq 17 can mark a sync point without flushing; older libpq flushes with it (which,
      # on a nonblocking connection, never waits).
      SEND_SYNC = PG::Connection.method_defined?(:send_pipeline_sync) ? :send_pipeline_sync : :sync_pipeline_sync
      # The end-of-turn flush holds a segment back for the next turn's statements (#hold_back)
      # only after a turn of the reactor that kept it busy for less than this many seconds
      # (Scheduler#busy): the held statements wait about one such turn.
      HOLD_TURN = 0.001
      # The parameters of a DEALLOCATE.
      EMPTY = [].freeze

      # @return [Connection]
      attr_reader :connection

      # @param connection [Connection] in pipeline mode
      # @param lock [Thread::Mutex] the pool's lock
      # @param owner [#pipeline_drained, #pipeline_reopened, #segment_settled, #connection_lost, #unlocked]
      #   the pool
      # @param address [String] the server, for messages
      def initialize(connection, lock, owner, address)
        @connection = connection
        @raw = connection.raw
        @lock = lock
        @owner = owner
        @address = address
        @queue = []    # requests sent whose results are not all in yet, in send order
        @segment = []  # requests whose results are in, waiting for their segment's sync point
        @spare_segment = nil # the next @segment, kept from the last settled (#settle_segment)
        @unsynced = 0  # requests sent since the last sync point (the segment being built)
        @syncs = 0     # sync points sent whose results have not come back
        @results = []  # what the reader takes from libpq in one go (#settle_ready), reused
        @clean = true  # every result of the segment being read so far succeeded
        # Who waits here (in #wait_for): the caller of each statement in flight that it has not
        # abandoned (#await), told from @segment and @queue; those that wait for something else
        # (#await_empty, the background task's #read_out and #cancel_until_ended), whose
        # condition variables are kept here in arrival order; and callers whose statements
        # were settled and who have not left yet (#settled_callers?). A Hash of every caller's
        # condition variable cost a store and a delete per statement (~80 ns on 3.3 + YJIT).
        @other_waiters = {}.compare_by_identity
        @in_wait = 0 # callers in #wait_for, all of the above
        @reader = nil  # the condition variable of the waiter currently reading
        @cancelling = false # a cancel request is on its way to the server: send nothing new
        @tidying = false    # a background task is cancelling abandoned statements
        @abandoned = 0      # abandoned statements in flight
        @draining = false
        @flush_scheduled = false
        # The end-of-turn flush: one timer, re-armed for every segment rather than a new timer
        # and block each time, on the timers of the reactor it was made in.
        @flush_timer = nil
        @flush_timers = nil
        @flush_scheduler = nil # the reactor of @flush_timers
        @deferred_flush = method(:deferred_flush)
        @held = false # the end-of-turn flush held the segment being built back (#hold_back)
        @hold_for = 0 # statements in the held segment at which it is written (#hold_back)
        @settled = 0  # statements settled since the end-of-turn flush last came (#hold_back)
        @segment_sent_at = nil # when the first statement of the segment being built was submitted
        @unwritten = 0      # statements submitted since the last flush (at the end of @queue)
        @progress_at = nil  # monotonic time the last segment's sync point came back
        @read_at = Timers.now  # monotonic time of the last read from the server (#wait_and_read)
        @arrived_after = @read_at # what the last read brought arrived after this (#wait_and_read)
        @slow_in_flight = 0 # statements in flight known to run long
        @statements = connection.statements # PreparedStatements, nil when the pool prepares none
        @segments = 0 # sync points sent so far: the number of the segment being built
      end

      # @return [Integer] statements in flight
      def depth
        @queue.size + @segment.size
      end

      # Set by the pool when a caller waits to pin this connection: no new statements are
      # added, so the pipeline empties and the connection can be handed over.
      attr_accessor :draining

      # @return [Boolean]
      def draining?
        @draining
      end

      # @return [Float] monotonic time of the last read from the server
      attr_reader :read_at

      # @return [Boolean] whether someone is reading results
      def reading?
        !@reader.nil?
      end

      # Whether callers whose statements were settled here have yet to come back from waiting:
      # woken, they run on the reactor's next turn, and most send a statement again at once
      # (Pool#take_unpressed leaves the connection to them).
      # @return [Boolean]
      def callers_returning?
        settled_callers?
      end

      # How much a new statement would wait here, for the pool to choose the least loaded
      # pipeline: the statements in flight, plus `limit` when the statement the server runs has
      # run longer than `stall_after` seconds (it may be long, and everything sent here waits
      # for it; see #stalled?). A pipeline with a statement in flight that the pool knows runs
      # long (Request#slow) takes nothing: a caller is better off waiting for whichever
      # connection frees up first. The pool asks it of every pipeline only when the shallowest
      # one (#open_depth) is stalled.
      # @return [Integer, nil] nil when it takes no statement now: `limit` in flight, a slow
      #   statement in flight, draining, or fenced (a cancel request is on its way)
      def load(now, limit, stall_after)
        # Written with the operators the VM runs without a method call (`> 0`, `[0]`): the
        # pool calls this for every pipeline on every statement.
        return nil if @cancelling || @draining || @slow_in_flight > 0
        depth = @queue.size + @segment.size
        return nil if depth >= limit
        head = @queue[0] or return depth
        started = head.sent_at # #segment_start, inlined
        progress = @progress_at
        started = progress if progress && progress > started
        now - started > stall_after ? depth + limit : depth
      end

      # The statements in flight, when the pipeline takes a statement now (as #load, without the
      # stall check): what the pool compares first, for every pipeline and statement, in Integers
      # only, whose arithmetic and comparisons YJIT compiles inline (the stall check's Floats are
      # method calls: two comparisons and a subtraction per pipeline).
      # @return [Integer, nil] nil when #load would be nil
      def open_depth(limit)
        return nil if @cancelling || @draining || @slow_in_flight > 0
        depth = @queue.size + @segment.size
        depth < limit ? depth : nil
      end

      # Whether a statement may be sent here at all, a slow one in flight or not: fewer than
      # `limit` in flight, not draining, not fenced (a cancel request is on its way).
      # @return [Boolean]
      def room?(limit)
        !@cancelling && !@draining && @queue.size + @segment.size < limit
      end

      # Whether whatever is sent here now would wait for a long statement: one the pool knows
      # as slow is in flight, or the statement the server runs has run longer than
      # `stall_after` seconds. That one is the oldest whose results are not in, and it started
      # when it was sent or when the segment before it ended, whichever is later (the
      # statements queued behind a long one start when it ends). PostgreSQL sends a segment's
      # results at its sync point, so progress is seen a segment at a time.
      # @return [Boolean]
      def stalled?(now, stall_after)
        return true if @slow_in_flight > 0 # not #positive?: a C method that looks `>` up on every call
        head = @queue[0] or return false
        # #segment_start, inlined as in #load: the pool asks this for every statement
        started = head.sent_at
        progress = @progress_at
        started = progress if progress && progress > started
        now - started > stall_after
      end

      # The statement known to run long that this pipeline carries and nothing else, while the
      # pipeline takes statements: the one a statement known to run long may queue behind (see
      # Pool#behind_slow). Not one whose caller left: it is about to be cancelled, and a cancel
      # request may land on whatever runs after it.
      # @return [Request, nil]
      def lone_slow
        return nil if @cancelling || @draining || @slow_in_flight != 1 || @segment.size + @queue.size != 1
        head = @queue[0]
        head unless head.nil? || head.abandoned?
      end

      # When the server started on a segment whose first statement is `first`: when that was
      # sent, or when the segment before it ended, whichever is later (as this process saw
      # them: the latest it can have started).
      # @param first [Request] the first statement of a segment in flight
      # @return [Float] monotonic time
      def segment_start(first)
        @progress_at && @progress_at > first.sent_at ? @progress_at : first.sent_at
      end

      # Hands a statement to libpq and sends it with the others submitted in this turn of the
      # reactor (at once outside Weft). A request marked `alone` gets a segment of its own.
      # Its statements go out in one write, and PostgreSQL answers them at the sync point
      # after the last, so a segment's statements count as sent when its first was submitted
      # (the clock is read once per segment), and then, once written, as sent when written
      # (#flush).
      # @raise [PG::Error] when libpq refuses it (nothing is queued then)
      def submit(request)
        alone = request.alone
        sync if alone && @unsynced > 0
        if @statements.nil? || request.unnamed
          @raw.send_query_params(request.sql, request.params)
        else
          send_named(request)
        end
        @segment_sent_at = Timers.now if @unsynced == 0
        request.sent_at = @segment_sent_at
        @queue << request
        @slow_in_flight += 1 if request.slow
        @unsynced += 1
        @unwritten += 1
        sync if alone
        schedule_flush unless @flush_scheduled # (a call saved for all but a turn's first statement)
        flush_held if @held && @unwritten >= @hold_for
      rescue PG::Error, IOError, SystemCallError => e
        # Refused with part of it sent (a prelude), libpq's queue and @queue no longer match.
        raise e unless @raw.status != PG::CONNECTION_OK || @queue.include?(request) || request.prelude
        lost(e)
        raise ConnectionError, lost_message(e)
      end

      # Waits for a submitted request and returns its result. If the caller is interrupted
      # (its deadline passed, it was cancelled or timed out) the request is abandoned: its
      # result is discarded when it arrives, and the server is asked to cancel it once it is
      # the statement running, without the caller waiting for that.
      # @return [PG::Result]
      def await(request)
        wait_for(request.condition, nil, request) # no block: it waits until `request` is settled
        request.value
      end

      # Waits until nothing is in flight and no cancel request is on its way, so the connection
      # can leave pipeline mode (reading results itself if nobody else does).
      # @param deadline [Deadline, nil] when to give up
      # @return [Boolean] false if the deadline passed first
      def await_empty(deadline = nil)
        wait_for(Thread::ConditionVariable.new, deadline) { idle? }
      end

      private

      def idle?
        @queue.empty? && @segment.empty? && !@cancelling
      end

      # Ends the segment being built with a sync point.
      def sync
        @raw.__send__(SEND_SYNC)
        @queue.last.segment_end = true
        @unsynced = 0
        @syncs += 1
        @segments += 1
      end

      # Sends the statement as the connection's PreparedStatements say: as the named statement
      # of its text, prepared before (or whose Parse is ahead of it in this segment); as a new
      # named statement, its Parse first (a text seen once before); or unnamed. Before a Parse
      # (or whatever is sent next, once statements were dropped) go the DEALLOCATEs of the
      # statements evicted or dropped. What goes before the statement (its prelude) is read
      # first, in order (#settle_ready, #prelude_result).
      def send_named(request)
        statements = @statements
        sql = request.sql
        params = request.params
        found = statements.lookup(sql, params, @segments, @raw)
        if found.nil? && statements.doomed.empty?
          @raw.send_query_params(sql, params)
          return
        end
        parse = found.equal?(:prepare)
        found = statements.prepare(sql, @segments) if parse
        doomed = statements.doomed
        until doomed.empty?
          name = doomed.shift
          (request.prelude ||= []) << name
          @raw.send_query_params("DEALLOCATE #{name}", EMPTY)
        end
        if found.nil?
          @raw.send_query_params(sql, params)
          return
        end
        if parse
          (request.prelude ||= []) << found
          @raw.send_prepare(found.name, sql)
        end
        request.named = found
        send_prepared(found.name, params)
      end

      # Sends the named statement: without parameters with one C call to libpq (NativeSender),
      # which spares what `pg`'s send_query_prepared does for parameters there are none of
      # (ext/weft_pg/weft_pg.c); where libpq refuses it, `pg`'s call raises libpq's error.
      def send_prepared(name, params)
        return if params.empty? && SENDER && SENDER.send_prepared(@raw, name)
        @raw.send_query_prepared(name, params)
      end

      # The result of something sent before `request` on its behalf (#send_named): a
      # DEALLOCATE's or its Parse's. The table of statements learns what came of it; if it
      # failed, the segment is rolled back for it, and the request is sent again, unnamed
      # (#retry?).
      def prelude_result(request, result)
        item = request.prelude[0]
        status = result.result_status
        code = result.error_field(PG::PG_DIAG_SQLSTATE) if status == PG::PGRES_FATAL_ERROR
        if item.is_a?(String)
          @statements.deallocated(item, status, code)
        else
          @statements.parsed(item, status, code)
        end
        unless SUCCEEDED.include?(status)
          @clean = false
          if status == PG::PGRES_FATAL_ERROR
            request.prelude_failed = true
            raise PG::ConnectionBad, result.error_message if @raw.status != PG::CONNECTION_OK
          end
        end
      ensure
        result.clear
      end

      # Closes the segment being built and writes what libpq holds.
      # @return [Boolean] whether everything was written
      def flush
        sync if @unsynced.positive?
        written = @raw.sync_flush # never waits (pg's #flush would, outside setnonblocking's aliases)
        mark_written if @unwritten > 0
        written
      end

      # The statements just written count as sent from now. The server cannot start on them
      # before, and under Weft they are written at the end of the reactor's turn (or when the
      # reader comes round), which on a busy reactor is long after they were submitted: counted
      # from then, that wait would pass for the server's time (see SlowStatements).
      def mark_written
        now = Timers.now
        Trace.event(:written, @connection, @unwritten) if Trace::ON
        queue = @queue
        index = queue.size - @unwritten
        index = 0 if index.negative? # some were read already (libpq writes when its buffer fills)
        while index < queue.size
          queue[index].sent_at = now
          index += 1
        end
        @unwritten = 0
      end

      # Under Weft, statements submitted during one turn of the reactor go out together: the
      # first schedules a flush for the end of the turn (a timer callback in the loop fiber,
      # which never waits), so many fibers' statements cost one write and one sync point.
      # Elsewhere (plain threads) each submit flushes at once.
      def schedule_flush
        return if @flush_scheduled
        scheduler = Weft.scheduler
        if scheduler && scheduler.thread.equal?(Thread.current)
          @flush_scheduled = true
          @held = false
          timers = scheduler.timers
          if @flush_timers.equal?(timers)
            @flush_timer.reschedule(0) # re-arms it, or moves it if the reader flushed first
          else
            @flush_scheduler = scheduler
            @flush_timers = timers
            @flush_timer = timers.after(0, @deferred_flush)
          end
        else
          flush
        end
      end

      # The end-of-turn flush (a timer callback in the loop fiber, after the reactor's poll):
      # writes the segment being built, unless it holds it back for a turn (#hold_back).
      def deferred_flush
        return unless @lock.try_lock # a thread holds it: the reader flushes on its next turn
        begin
          settled = @settled
          @settled = 0
          return if hold_back(settled)
          @flush_scheduled = false
          flush unless @raw.finished?
        rescue PG::Error, IOError, SystemCallError
          nil # the reader meets the same failure and fails the statements in flight
        ensure
          @lock.unlock
        end
      end

      # Whether the end-of-turn flush leaves the segment being built to the next turn (re-arming
      # itself for it), which it does once, when callers were woken here since its last flush,
      # fibers woken so far are ready to run and the reactor's turns are short.
      #
      # The case it is for: a connection's reader, resumed inside the reactor's poll, settles a
      # segment, wakes its other callers and goes on at once with its own fiber's next
      # statement. The woken callers run first thing on the next turn and send theirs, to this
      # connection (the least loaded now); written at once, the reader's statement went in a
      # segment of its own and theirs in a second one, two writes and two rounds of the server
      # where one does (in bench/postgres/pool_bench.rb half the segments held one statement;
      # held back, 97% hold 21-25: bench/results/postgres-ruby-3.3.md, 2026-12-07).
      #
      # The segment is written as soon as it holds as many statements as were settled here
      # since the last end-of-turn flush, by the last of the woken callers to send its
      # statement (#flush_held), before the rest of the next turn's fibers run; if not all of
      # them come back, by the reader at the next poll (it waits for the socket to turn
      # writable too, #lead) or by this flush after it. With no caller woken here beside those
      # whose statements it holds (a reader whose own statement settled alone) nobody is known
      # to be coming, and nothing is held. The wait is a turn at most, so the hold is made only
      # after a turn that kept the reactor busy for less than HOLD_TURN (Scheduler#busy, less the
      # time the machine's load kept the thread waiting for a core: #callers_coming?): on a
      # reactor busy with CPU-bound fibers every statement is written at the end of the turn it
      # was sent in, as without the hold. Statements count as sent when written
      # (#mark_written): the wait is never taken for the server's time.
      # @param settled [Integer] statements settled here since the last end-of-turn flush
      # @return [Boolean] whether it held the segment back
      def hold_back(settled)
        return false if @held || @unwritten.zero? || settled <= @unwritten || !callers_coming?
        @held = true
        @hold_for = settled
        @flush_timer.reschedule(0)
        true
      end

      # Whether the callers woken here are about to send (fibers wait for the next turn) and
      # the reactor's last turn was short enough for the held statements to wait it out.
      #
      # The turn is its wall time less the share of its time the thread lately waited for a
      # core (Pool#recent_core_wait, read every 0.1 s as answers come): a process the machine's
      # load keeps off its core has turns long by the wall clock whose work is short, and the
      # next turn's statements wait for that core whether the segment is held or not. By the wall
      # clock 10-25% of the flushes beside CPU hogs came after a turn over HOLD_TURN (3-3.5% by
      # the thread's CPU time, whose reading costs ~1.65 µs: too dear for every turn of every
      # reactor). Reading the core wait costs nothing here; with it segments beside 3 CPU hogs
      # held 27-35 statements where they held 22-30 (bench/results/postgres-ruby-3.3.md, "Fast
      # statements marked slow under load"). A reactor busy with its own work waits for no core:
      # its turns count in full, and nothing is held after a long one.
      def callers_coming?
        scheduler = @flush_scheduler
        scheduler.ready? && scheduler.busy * (1.0 - @owner.recent_core_wait) < HOLD_TURN
      end

      # Writes the held segment: every caller it was held for has sent its statement (#hold_back).
      def flush_held
        @held = false
        @flush_scheduled = false
        flush
      end

      # Waits until `request` is settled, or, without one, until the block is true, reading
      # results meanwhile if nobody else is. A statement's caller (#await) passes no block: a
      # block made and called for every statement, and again by #lead for every result it
      # reads, cost more than the check itself on Ruby 3.1.
      # @param deadline [Deadline, nil] when to give up
      # @param request [Request, nil] the statement in flight the caller waits for (its
      #   `condition`): the caller counts as waiting here while that is in flight, and abandons
      #   it if it leaves first; nil: the caller waits for something else (the block)
      # @return [Boolean] false if the deadline passed first
      def wait_for(condition, deadline = nil, request = nil, &done)
        @in_wait += 1
        @other_waiters[condition] = true unless request
        until request ? request.settled? : yield
          return false if deadline&.expired?
          # With nothing in flight there is nothing to read: a cancel request is under way, and
          # its end wakes every waiter.
          if @reader || in_flight_none?
            condition.wait(@lock, deadline&.remaining)
          else
            lead(condition, deadline, request, &done)
          end
        end
        finished = true
      ensure
        @in_wait -= 1
        if request.nil?
          @other_waiters.delete(condition)
        elsif !finished && !request.settled? # (`finished`: its request is settled, no call to ask)
          # The caller was interrupted (its deadline passed, it was cancelled or timed out): it
          # abandons its statement, and from then on no longer counts as waiting here.
          request.abandon
          @abandoned += 1
          abandoned = true
        end
        leave unless @reader # (as #leave begins: the call saved while another caller reads)
        cancel_abandoned_head if abandoned
      end

      # A waiter left (#wait_for): passes the reader role on, unless someone reads or a caller
      # whose statement was settled has yet to leave (it passes the role on as it leaves, and
      # the first of them to send a statement again becomes the reader: waking a caller still
      # waiting now would mostly wake it for nothing). The last to leave, with statements still
      # in flight (all abandoned), leaves them to the background task that reads them out
      # (#cancel_abandoned_head).
      def leave
        return if @reader || settled_callers?
        waiter = first_waiter
        waiter ? waiter.signal : cancel_abandoned_head
      end

      # Whether callers whose statements were settled (woken, or failed with the connection)
      # are still in #wait_for: more callers than the statements in flight not abandoned and
      # the other waits account for.
      def settled_callers?
        @in_wait > @queue.size + @segment.size - @abandoned + @other_waiters.size
      end

      # The condition variable of the first caller waiting here, but `except`'s: the caller
      # of the first statement in flight it has not abandoned (in the order the results
      # come), else the first of those waiting for something else. Nil when nobody waits.
      def first_waiter(except = nil)
        waiter = waiting_caller(@segment, except) || waiting_caller(@queue, except)
        return waiter if waiter
        @other_waiters.each_key { |other| return other unless other.equal?(except) }
        nil
      end

      # The condition variable of the first caller waiting for one of `requests`, but
      # `except`'s. (A loop without a block, as in #settle_ready.)
      def waiting_caller(requests, except)
        index = 0
        while index < requests.size
          request = requests[index]
          index += 1
          next if request.abandoned?
          condition = request.condition
          return condition unless condition.equal?(except)
        end
        nil
      end

      # Wakes everyone waiting here (each looks again at what it waits for).
      def signal_waiters
        [@segment, @queue].each do |requests|
          requests.each { |request| request.condition.signal unless request.abandoned? }
        end
        @other_waiters.each_key(&:signal)
      end

      def in_flight_none?
        @queue.empty? && @segment.empty?
      end

      # Reads results until `request` is settled, or without one until the block is true (or
      # the deadline passes), as the connection's reader (see #wait_for).
      #
      # A caller that becomes the reader while the end-of-turn flush is armed (#schedule_flush:
      # statements were submitted in this turn, its own maybe among them) does not flush
      # first: that sent what was there alone, and the statements the turn's other fibers
      # submit after it in a segment of their own, two sync points and two writes where one
      # does. It waits for the socket to turn writable as well as readable, which the reactor's
      # next poll finds once the turn's fibers have run, and then flushes them all (unless the
      # end-of-turn flush came first). The statements count as sent when they are written
      # (#mark_written), not while they sat in libpq's buffer, so the reactor's work on other
      # fibers meanwhile is not taken for the server's time (SlowStatements).
      def lead(condition, deadline, request)
        @reader = condition
        deferred = @flush_scheduled
        until request ? request.settled? : yield
          if deferred
            deferred = false
            events = IO::READABLE | IO::WRITABLE
          else
            @flush_scheduled = false
            events = flush ? IO::READABLE : IO::READABLE | IO::WRITABLE
          end
          settle_ready
          # Nothing in flight: nothing to read (the caller waits for a cancel request instead).
          break if (request ? request.settled? : yield) || in_flight_none? || deadline&.expired?
          wait_and_read(events, deadline&.remaining)
        end
      rescue PG::Error, IOError, SystemCallError => e
        lost(e)
      ensure
        @reader = nil
        @owner.connection_lost(self) if @connection.broken? # see #lost
        first_waiter(condition)&.signal unless settled_callers? # (the reader's own #leave follows)
      end

      # Waits for the socket (with the lock released) and reads what has come. What the read
      # brings arrived after the read before it (which found it not in), and after the moment
      # the socket became ready, when the reactor can tell (ServerTime): that is the earliest a
      # segment whose sync point it brings can have ended on the server (#settle_segment).
      # Woken only because the socket can be written to (#lead), it reads nothing.
      #
      # Statements submitted since the reader's last flush, whose end-of-turn flush is still to
      # come, are written first, with their sync point: libpq's consume_input writes whatever
      # it holds before it reads, so they went out without it, and the sync point in a write of
      # its own when the flush came, two writes where one does. That was the common case: the
      # reactor resumes a reader inside its poll, after the turn's fibers have submitted and
      # before its timers fire. A write costs this process ~5 µs of CPU on a local server (the
      # kernel runs the receiving side of loopback TCP in the writer's system call), and the
      # second write made a third of all writes (bench/results/postgres-ruby-3.3.md).
      def wait_and_read(events, timeout)
        io = @raw.socket_io
        waiting_since = Timers.now
        ready = @owner.unlocked { io.wait(events, timeout) }
        return if ready.is_a?(Integer) && (ready & IO::READABLE).zero?

        ready_after = ServerTime.ready_after(waiting_since)
        if @flush_scheduled
          @flush_scheduled = false
          flush
        end
        read_at = @read_at
        @raw.consume_input
        @read_at = Timers.now
        @arrived_after = ready_after && ready_after > read_at ? ready_after : read_at
      end

      # Takes every result libpq has complete without waiting (ResultReader), and settles the
      # statements of each segment whose sync point came back.
      def settle_ready
        return if @syncs == 0 # not #zero?, a method call on 3.1 (and below: this runs per result)
        results = @results
        failed = READER.take(@raw, results, @syncs)
        queue = @queue
        # A loop rather than Array#each: the block would be called from C for every result, and
        # a `break` out of it unwinds through C.
        index = 0
        while index < results.size
          result = results[index]
          index += 1
          if result.nil? # the end of the head statement's results (or of its prelude's first)
            request = queue[0] or next
            if (prelude = request.prelude)
              prelude.shift
              request.prelude = nil if prelude.empty?
              next
            end
            queue.shift
            @clean = false if request.result.nil?
            @segment << request
          elsif result.equal?(true) # a sync point
            @syncs -= 1
            settle_segment
            break if @connection.broken? # sending a statement again failed: everything failed with it
          elsif (request = queue[0])
            next prelude_result(request, result) if request.prelude
            request.result ? result.clear : request.result = result
            next if failed == 0 || SUCCEEDED.include?(result.result_status)
            @clean = false
            raise PG::ConnectionBad, result.error_message if @raw.status != PG::CONNECTION_OK
          end
        end
      ensure
        results&.clear
      end

      # A segment's sync point came back: its statements are committed, or, if one failed,
      # rolled back (the failing one and those before it) or skipped (those after it). The
      # failing statement's caller gets the error; the others are sent again, in a later
      # segment. Then sees to what follows.
      def settle_segment
        segment = @segment
        @segment = @spare_segment || [] # the Array of a segment settled before, emptied
        @spare_segment = nil
        # The server's time on the segment as far as it can be told, which is what the pool
        # learns from (SlowStatements): from the latest the server can have started on it to
        # the earliest its sync point can have arrived (#wait_and_read). Up to when the sync point
        # is read instead, it would include the time this process took to get round to reading
        # it (a busy reactor, a core shared with other processes), and short statements would
        # pass for long ones under load. Where the floor comes before the start as counted, the
        # pool cannot tell the time: it counts 0 (see ServerTime.segment_time).
        started = segment.empty? ? @read_at : segment_start(segment.first)
        took = ServerTime.segment_time(@arrived_after, started)
        @progress_at = @read_at
        @settled += segment.size
        segment.each { |request| @slow_in_flight -= 1 if request.slow } if @slow_in_flight > 0
        segment.each { |request| Trace.event(:answered, @connection, request.object_id) } if Trace::ON
        clean = @clean
        @clean = true
        clean ? settle_committed(segment) : settle_failed(segment)
        @owner.segment_settled(self, segment, took, started)
        segment.clear
        @spare_segment = segment
        in_flight_none? ? release_if_idle : cancel_abandoned_head
      end

      # Every statement of the segment succeeded: each caller gets its result.
      def settle_committed(segment)
        index = 0
        while index < segment.size # no block called from C for every statement (#settle_ready)
          request = segment[index]
          index += 1
          if request.abandoned?
            request.result.clear
            @abandoned -= 1
          end
          request.settle
        end
      end

      # A statement of the segment failed (or came without a result): sorts out who gets an
      # error and who is sent again.
      def settle_failed(segment)
        failed = segment.size > 1
        segment.each do |request|
          if request.abandoned?
            request.result&.clear
            request.settle
            @abandoned -= 1
          elsif retry?(request, failed, segment.size)
            request.result&.clear
            resend(request)
          else
            deliver(request)
          end
        end
      end

      # Whether a statement is to be sent again rather than answered: it was rolled back or
      # skipped because another statement of its segment failed, or it failed because of what
      # it shared (a cancel request meant for another statement, or a transaction with others).
      def retry?(request, segment_failed, segment_size)
        result = request.result
        return true if request.exposed? && cancelled?(result)
        return request.unnamed = true if request.prelude_failed
        return segment_failed unless failed?(result)
        # A named statement's own failure (it is gone, or its plan no longer fits): sent unnamed.
        return request.unnamed = true if request.named && @statements.invalidated?(request.named, result)
        return false unless segment_size > 1 && from_sharing?(result)

        request.alone = true
      end

      def failed?(result)
        !result.nil? && result.result_status == PG::PGRES_FATAL_ERROR
      end

      # An error that a statement can meet only because it shared a transaction with others.
      def from_sharing?(result)
        code = result.error_field(PG::PG_DIAG_SQLSTATE).to_s
        SHARING_ERRORS.any? { |prefix| code.start_with?(prefix) }
      end

      def deliver(request)
        result = request.result
        if result.nil?
          request.settle(MissingResult.new("PostgreSQL returned no result for: #{request.sql}"))
        else
          begin
            result.check
            request.settle
          rescue PG::Error => e
            request.settle(e)
          end
        end
      end

      def cancelled?(result)
        !result.nil? && result.result_status == PG::PGRES_FATAL_ERROR &&
          result.error_field(PG::PG_DIAG_SQLSTATE) == QUERY_CANCELED
      end

      # Sends a request again at the end of the queue (its caller keeps waiting for it). One
      # rolled back with others more than once gets a segment of its own, so that it cannot be
      # held up for ever by statements of other callers that keep failing.
      def resend(request)
        request.result = nil
        request.named = nil
        request.prelude = nil
        request.prelude_failed = false
        request.exposed = @cancelling
        request.segment_end = false # (a new request's is, Request#reset)
        request.resent += 1
        request.alone = true if request.resent > 1
        submit(request)
      rescue PG::Error => e # ConnectionError included: everything in flight failed with it
        request.settle(e) unless request.settled?
      end

      # With nothing in flight the connection goes back to the pool, unless a cancel request is
      # still on its way: it would hit the next user's statement.
      def release_if_idle
        @owner.pipeline_drained(self) if idle?
      end

      # The connection failed: every request in flight fails (with the server's own error when
      # one arrived first, e.g. "terminating connection due to administrator command").
      def lost(error)
        @connection.broken!
        failed = @segment + @queue
        @queue = []
        @segment = []
        @unsynced = 0
        @syncs = 0
        @unwritten = 0
        @abandoned = 0
        @slow_in_flight = 0
        @clean = true
        message = lost_message(error)
        failed.each do |request|
          request.settle(server_error(request.result) || ConnectionError.new(message))
        end
        signal_waiters
        if @reader
          # A reader waiting on the socket would never hear of its closing (libpq closes the
          # descriptor underneath Ruby): shut the socket down so that it wakes; it gives the
          # connection up as it leaves (#lead).
          shut_socket
        else
          @owner.connection_lost(self)
        end
      end

      # The error a failed result carries (nil for any other result, a skipped one included).
      def server_error(result)
        return nil unless failed?(result)
        result.check
        nil
      rescue PG::Error => e
        e
      end

      def shut_socket
        @raw.socket_io.shutdown(Socket::SHUT_RDWR)
      rescue PG::Error, IOError, SystemCallError
        nil # closed already
      end

      def lost_message(error)
        "connection to PostgreSQL at #{@address} lost with statements in flight: " \
          "#{error.message.strip} (#{error.class})"
      end

      # If a statement of the segment the server runs now (the first whose results are not in)
      # was abandoned, starts a background task that cancels it on the server, unless one is at
      # work already. PostgreSQL sends a segment's results only at its sync point, so which of
      # its statements runs cannot be told: the cancel request may end another one, which is
      # then sent again (every statement in flight is exposed to it, see #send_cancel), as are
      # the others of the segment, rolled back with it. The task also reads out what is left
      # unread (#unread?).
      def cancel_abandoned_head
        return if @tidying || @abandoned.zero? || !(abandoned_running || unread?)
        @tidying = true
        Background.run("weft-postgres cancel") { @lock.synchronize { cancel_abandoned } }
      end

      # Whether statements are in flight that nobody waits for: their callers all left, and
      # nothing else would read their results (a connection is read only by its waiters). A
      # cancelled statement's error comes back before its segment's sync point, in a write of
      # its own, so the last waiter can leave with the sync point unread. Unread, the
      # connection would never be given back to the pool: no new statement is sent to it while
      # it carries one known to run long or drains for a caller waiting to pin it.
      def unread?
        @in_wait.zero? && !in_flight_none?
      end

      # @return [Request, nil] an abandoned statement of the segment the server runs now,
      #   whose result is not in
      def abandoned_running
        @queue.each do |request|
          return request if request.abandoned? && request.result.nil?
          break if request.segment_end
        end
        nil
      end

      # In the background task: while the segment the server runs has an abandoned statement,
      # has it cancelled; then, while nobody waits here, reads out what is still in flight, so
      # the connection comes back to the pool. If the server does not end a cancelled statement
      # or answer within CANCEL_GRACE, the connection is given up.
      def cancel_abandoned
        loop do
          if (target = abandoned_running)
            next if cancel_until_ended(target)
          elsif unread?
            next if read_out
          else
            break
          end
          lost(Unresponsive.new("a cancelled statement did not end within #{CANCEL_GRACE}s"))
        end
      ensure
        @tidying = false
      end

      # Reads until nothing is in flight, a caller sends a statement here (its reading is its
      # own then) or an abandoned statement runs (to be cancelled).
      # @return [Boolean] false if that did not happen within CANCEL_GRACE
      def read_out
        reader = Thread::ConditionVariable.new
        wait_for(reader, Deadline.after(CANCEL_GRACE)) do
          in_flight_none? || @in_wait > 1 || !abandoned_running.nil?
        end
      end

      # Asks the server to cancel the statement (again every CANCEL_REPEAT seconds) and reads,
      # if nobody else does, until its result is in (it is settled with its segment). A
      # statement whose result has arrived ran to its end: it is not cancelled.
      # @return [Boolean] false if it had not ended within CANCEL_GRACE
      def cancel_until_ended(target)
        give_up = Deadline.after(CANCEL_GRACE)
        ended = -> { target.settled? || !target.result.nil? || @segment.include?(target) }
        until ended.call
          return false if give_up.expired?
          send_cancel(target)
          wait_for(Thread::ConditionVariable.new, Deadline.earliest(Deadline.after(CANCEL_REPEAT), give_up), &ended)
        end
        true
      end

      # Sends the cancel request with the lock released, and nothing new down this connection
      # until it is delivered (fenced); everything in flight meanwhile is exposed to it.
      def send_cancel(target)
        @cancelling = true
        @queue.each { |request| request.exposed = true unless request.equal?(target) }
        begin
          @owner.unlocked { @raw.cancel } # pg's cancel waits on sockets: the reactor keeps turning
        ensure
          @cancelling = false
        end
        @owner.pipeline_reopened(self)
        signal_waiters # a drain waiting for the cancel request to be delivered
        release_if_idle
      end

      # The server did not settle a cancelled statement in time.
      class Unresponsive < StandardError
        include Error
      end
      private_constant :Unresponsive
    end
  end
end
