# frozen_string_literal: true

require "pg"
require_relative "errors"
require_relative "settings"
require_relative "connection"
require_relative "pipeline"
require_relative "prepared_statements"
require_relative "request"
require_relative "background"
require_relative "lease"
require_relative "statement_scope"
require_relative "slow_statements"
require_relative "server_time"
require_relative "trace"
require_relative "../timers"
require_relative "../promise"
require_relative "../deadline"
require_relative "../renamed_options"
require_relative "../fork_handler"

module Weft
  module Postgres
    # A fiber-aware PostgreSQL connection pool that pipelines single statements automatically.
    #
    #   pool = Weft::Postgres::Pool.new(ENV["DATABASE_URL"], limit: 8)
    #   pool.query("select name from users where id = $1", id) # => PG::Result
    #   pool.with { |conn| conn.exec("set search_path to app"); conn.exec("...") }
    #   pool.transaction { |conn| conn.exec_params("insert ...", [...]) }
    #
    # `query` runs a statement alone on a free connection while connections are plentiful; once
    # they run short it shares them: many fibers' statements travel on one connection at once in
    # libpq pipeline mode (see Pipeline), up to `pipeline_depth` in flight per connection.
    # `with` and `transaction` pin a connection for the caller alone (session state, several
    # statements in one transaction); a pinned connection is out of the shared set until it is
    # given back. `lease` does the same for a use that spans several calls (see Lease).
    #
    # Connections are opened lazily up to `limit`, checked for life before reuse (but those
    # given back a moment before, JUST_USED), closed past `max_age` or `idle_timeout`, replaced
    # when broken, and never shared across fork. The option names are those of every pool in
    # Weft (Weft::Pool, the HTTP client's).
    # The pool is safe to use from many fibers and from many threads.
    #
    # Every wait honours the caller's deadline (Weft.deadline): a checkout waits no longer than
    # the deadline leaves (then Weft::DeadlineExceeded, not PoolTimeout), and a statement the
    # deadline interrupts is cancelled on the server off the caller's path (see Background).
    class Pool
      # Statements in flight on one shared connection, at most.
      DEFAULT_PIPELINE_DEPTH = 64
      # A shared connection whose statement at the head has run this long (seconds) is avoided
      # while another has room: the statements behind it would wait for it. Short statements
      # take well under a millisecond on a healthy server; 2 ms did better than 10 ms in the
      # benchmark with a slow statement every N requests. One the pool has seen run long
      # (SlowStatements) is kept apart from the start (see docs/postgres.md, "Routing").
      STALL_AFTER = 0.002
      # A known-slow statement queues behind another due to end within this many times its own
      # known time (#behind_slow).
      SAME_LENGTH = 1.25
      # Why #query refuses a change of the session outside #with: on a shared connection (or one
      # given back when the statement ends) it would stay for every later caller of that
      # connection, and the caller's next statement, which may go down another connection,
      # could neither see nor undo it (an advisory lock that cannot be unlocked, a LISTEN whose
      # notifications nobody reads, a COPY whose data has nowhere to go).
      SESSION_REFUSED = "Pool#query cannot change the session of a shared connection (SET, LISTEN, COPY, " \
                        "DEALLOCATE, a session advisory lock, a temporary table...): run it inside Pool#with, " \
                        "and undo it there, or set connections up with on_connect:"
      # #query_stateless's parameters when none are given.
      NO_PARAMS = [].freeze
      private_constant :NO_PARAMS
      # Seconds a connection given back after an interrupted statement may take to be made
      # usable again (cancel, drain, rollback) before it is closed instead.
      RESET_GRACE = 2.0
      # Result statuses of a COPY in progress, which #discard_results cannot read past.
      COPY_STATUSES = [PG::PGRES_COPY_IN, PG::PGRES_COPY_OUT, PG::PGRES_COPY_BOTH].freeze
      # Seconds since a connection was given back within which it is taken again without a
      # look at its socket for life (Connection#usable?, a system call): it was answering
      # statements a moment ago, and had it died since, its statement would fail as one does on
      # a connection that dies in use (the look is for connections that sat idle while the
      # server restarted or ended their backends). A shared connection goes back to the pool
      # whenever its pipeline empties and is taken again by the next statement, within a
      # reactor turn or two: 0.034 times per statement in pool_bench, a `recvfrom` each.
      # (HikariCP skips its check the same way, for 500 ms.)
      JUST_USED = 0.01
      # Outside a fiber scheduler, a deadline or Timeout reaches a thread as an exception raised
      # into it by another thread, at whatever it is doing. The pool lets it in only where it is
      # ready for it, like a fiber scheduler does, so it can never land between taking a
      # connection and the `ensure` that gives it back, or in the middle of the bookkeeping:
      # while a connection is taken and under the lock, at waits only;
      AT_WAITS = { Exception => :on_blocking }.freeze
      # while the caller's own code or statement runs, anywhere;
      ANYWHERE = { Exception => :immediate }.freeze
      # while a connection is given back (bounded by RESET_GRACE on its own), not at all.
      NOWHERE = { Exception => :never }.freeze

      # Seconds a lease's statement waits for its answer on the thread itself while connections
      # are short (see #await_answer): several round trips of a short statement on a local
      # server, a small fraction of a reactor turn under load.
      PROMPT_WAIT = 0.001
      # Waits for an IO to turn readable with the thread itself, the reactor not running
      # meanwhile. From 3.2 a blocking fiber's waits do not go through the scheduler (IO.select
      # would: the io_select hook); 3.1 has no io_select hook, so IO.select waits on the thread,
      # and no fiber need be made for each wait.
      BLOCKING_WAIT =
        if Fiber.respond_to?(:blocking) # Ruby 3.2
          ->(io, seconds) { Fiber.blocking { io.wait_readable(seconds) } }
        else
          ->(io, seconds) { IO.select([io], nil, nil, seconds) }
        end

      # Options of .new that were renamed: old name => new name (see Weft::RenamedOptions).
      RENAMED_OPTIONS = { size: :limit, checkout_timeout: :acquire_timeout, max_lifetime: :max_age }.freeze

      # @return [Integer] the most connections the pool opens
      attr_reader :limit
      # @deprecated the old name of #limit
      alias size limit
      # @return [Settings]
      attr_reader :settings

      # Accepts the old names of renamed options (RENAMED_OPTIONS), with a deprecation warning.
      # @see #initialize
      def self.new(target = nil, **options)
        super(target, **RenamedOptions.rename("Weft::Postgres::Pool.new", options, RENAMED_OPTIONS))
      end

      # @param target [String, Hash, nil] URL, conninfo string or Hash of libpq parameters;
      #   nil means DATABASE_URL (or libpq's PG* environment defaults)
      # @param limit [Integer] connections at most (default: WEFT_PG_POOL_SIZE or 10); old name:
      #   size
      # @param pipelining [Boolean] share connections for #query in pipeline mode (needs libpq
      #   14 or newer; off otherwise)
      # @param pipeline_depth [Integer] statements in flight per shared connection, at most
      # @param acquire_timeout [Numeric, nil] seconds to wait for a connection or a pipeline
      #   slot before raising PoolTimeout (a statement waiting for a connection without a slow
      #   statement on it queues behind one then, if one has room); nil: no limit but the
      #   caller's deadline; old name: checkout_timeout
      # @param connect_timeout [Numeric] seconds to wait for the server when connecting
      # @param statement_timeout [Numeric, nil] seconds; the server cancels longer statements
      # @param max_age [Numeric, nil] seconds after which a connection is closed once free (each
      #   connection at its own point between 90% and 100% of it, so that those opened together
      #   are not replaced together); old name: max_lifetime
      # @param idle_timeout [Numeric, nil] seconds a free connection may stay unused
      # @param application_name [String, nil] shown in pg_stat_activity
      # @param on_connect [#call, nil] called with each new PG::Connection (type maps, SETs)
      # @param connector [#call, nil] opens each connection instead of PG.connect: called with
      #   the libpq conninfo string (target plus the options above), returns an open
      #   PG::Connection, which may be of a subclass (a library's own connection class, as
      #   Sequel's adapter has)
      # @param prepared_statements [Integer, Boolean] #query (and Lease#exec_params) prepares the
      #   texts it sees again on each connection, inside transactions on a held connection too,
      #   keeping this many named statements per connection at most (true:
      #   PreparedStatements::DEFAULT_LIMIT); false (or 0) sends every statement unnamed, as
      #   PgBouncer in transaction pooling before 1.21 needs (see docs/postgres.md, "Prepared
      #   statements")
      def initialize(target = nil, limit: Integer(ENV.fetch("WEFT_PG_POOL_SIZE", 10)), pipelining: true,
                     pipeline_depth: DEFAULT_PIPELINE_DEPTH, acquire_timeout: 5.0,
                     connect_timeout: Settings::DEFAULT_CONNECT_TIMEOUT, statement_timeout: nil,
                     max_age: nil, idle_timeout: 300, application_name: "weft", on_connect: nil, connector: nil,
                     prepared_statements: PreparedStatements::DEFAULT_LIMIT)
        raise ArgumentError, "limit must be a positive Integer" unless limit.is_a?(Integer) && limit.positive?
        unless pipeline_depth.is_a?(Integer) && pipeline_depth.positive?
          raise ArgumentError, "pipeline_depth must be a positive Integer"
        end
        unless acquire_timeout.nil? || (acquire_timeout.is_a?(Numeric) && acquire_timeout.real? &&
                                        acquire_timeout.finite? && acquire_timeout.positive?)
          raise ArgumentError, "acquire_timeout must be a positive, finite number of seconds or nil"
        end

        @prepared_limit = prepared_statements_limit(prepared_statements)
        @settings = Settings.new(target, connect_timeout: connect_timeout, statement_timeout: statement_timeout,
                                         application_name: application_name)
        @limit = limit
        @pipelining = pipelining && Postgres.pipelining_supported?
        @pipeline_depth = pipeline_depth
        # Spare Requests kept (#pipelined) at most: as many as can be in flight at once
        @spare_requests_kept = limit * pipeline_depth
        @acquire_timeout = acquire_timeout
        @max_age = max_age
        @idle_timeout = idle_timeout
        @on_connect = on_connect
        @connector = connector
        @closed = false
        @slow_statements = SlowStatements.new
        reset_state
      end

      # @return [Boolean] whether #query shares connections in pipeline mode
      def pipelining?
        @pipelining
      end

      # @return [Integer, nil] named statements #query keeps per connection at most (nil: it
      #   prepares none)
      attr_reader :prepared_limit

      # Runs one statement and returns its result. With pipelining on, the statement shares a
      # connection with other callers' statements; otherwise it takes a connection for itself.
      # A fiber's own statements run in the order it issues them.
      #
      # A setting of the transaction under way (SET LOCAL, SET TRANSACTION, SET CONSTRAINTS,
      # set_config) runs in a pipeline segment of its own: a segment is one implicit transaction,
      # and the other callers' statements after it in the segment would run with the setting.
      # Alone, it changes nothing past its own statement, as on a connection of its own (where
      # PostgreSQL warns about SET LOCAL outside a transaction); settings for several statements
      # go inside #transaction or #with. So does the end of a transaction (COMMIT, ROLLBACK...),
      # which in a shared segment would commit or roll back the other callers' statements before
      # it: alone, it ends nothing, as on a connection of its own. A change of the session (SET,
      # LISTEN, COPY, a session advisory lock, a temporary table: StatementScope.session_state?)
      # is refused outside #with (SESSION_REFUSED says why).
      #
      # Under a deadline (Weft.deadline) the statement, and the wait for a connection, last no
      # longer than it leaves; when it passes, the statement is cancelled on the server (see
      # docs/postgres.md, "Deadlines").
      #
      # @param sql [String] one statement; `$1`, `$2`... refer to params
      # @param params [Array] values for the placeholders (nil is NULL; others are sent as text)
      # @return [PG::Result]
      # @raise [PG::Error] the statement's error, for this caller only
      # @raise [PoolTimeout] when no connection or pipeline slot frees up within acquire_timeout
      #   (none had room, not even behind a slow statement)
      # @raise [Weft::DeadlineExceeded] when the caller's deadline passes first
      # @raise [ConnectionError] when the server cannot be reached or the connection is lost
      # @raise [ArgumentError] for BEGIN (use #transaction), and for a change of the session
      #   outside #with
      def query(sql, *params)
        role = StatementScope.transaction_role(sql)
        raise ArgumentError, "Pool#query cannot open a transaction; use Pool#transaction" if role == :start
        run_query(sql, params, role)
      end

      # @api private
      # #query for a text its caller has already found to open no transaction and leave nothing
      # in the session (StatementScope.transaction_statement? and .session_state? both false):
      # the ActiveRecord and Sequel adapters test that themselves, to send such texts to a
      # connection of their own, and the session test is most of #query's own (~0.33 µs of
      # ~0.48 on an unfrozen 110-byte SELECT, 3.3 + YJIT; the adapters' texts are unfrozen, so
      # #query's remembered roles do not spare it). Only the end of a transaction is looked for.
      # @param sql [String]
      # @param params [Array] values for the placeholders, as #query's
      # @return [PG::Result]
      def query_stateless(sql, params = NO_PARAMS)
        run_query(sql, params, StatementScope.transaction_end?(sql) ? :end : nil)
      end

      # Pins a connection for the block: session state (SET, temporary tables, prepared
      # statements) and several statements in a row. The connection goes back to the pool
      # afterwards; if the block was interrupted mid-statement the statement is cancelled and
      # any open transaction rolled back first, or the connection is closed.
      #
      # Inside the block the fiber keeps using that connection: a nested #with gets it again,
      # and #query and #transaction run on it (so they see the block's session and transaction).
      # @yieldparam conn [PG::Connection]
      # @return the block's value
      # @raise [PoolTimeout, Weft::DeadlineExceeded] when no connection frees up in time
      def with
        if (connection = pinned)
          return yield connection.raw
        end

        Deadline.current&.check!
        interruptible(AT_WAITS) do
          connection = checkout_pinned
          clean = false
          Thread.current[@pin_key] = connection # fiber-local
          begin
            value = interruptible(ANYWHERE) { yield connection.raw }
            clean = true
            value
          ensure
            Thread.current[@pin_key] = nil
            interruptible(NOWHERE) { checkin_pinned(connection, clean) }
          end
        end
      end

      # Runs the block in a transaction on a pinned connection: commits when the block returns,
      # rolls back when it raises, its task is cancelled or its deadline passes; the connection
      # stays usable.
      #
      # Called inside another #transaction (or a #with block that began one), it joins the
      # enclosing transaction by default: its statements commit or roll back with the enclosing
      # ones. With `requires_new: true` it runs in a savepoint of the enclosing transaction
      # instead: released when the block returns, rolled back to (undoing the block's statements
      # only) when it raises, is interrupted or leaves early; the error goes on and the enclosing
      # transaction stays usable.
      # @param requires_new [Boolean] inside a transaction, run the block in a savepoint of it
      # @yieldparam conn [PG::Connection]
      # @return the block's value
      # @raise [TransactionRolledBack] when COMMIT (or the end of a savepoint) found the work
      #   already failed (an error inside the block was rescued); a savepoint is rolled back to
      #   then, and the enclosing transaction goes on
      def transaction(requires_new: false)
        enclosed = !pinned.nil?
        with do |conn|
          unless conn.transaction_status == PG::PQTRANS_IDLE
            next requires_new ? in_savepoint(pinned) { yield conn } : yield(conn)
          end

          conn.exec("BEGIN")
          begin
            value = yield conn
          rescue Exception # rubocop:disable Lint/RescueException
            # Inside an enclosing #with the caller may rescue and go on using the connection:
            # roll back now. Otherwise #with gives the connection back, rolling back as it does.
            restore(conn) if enclosed
            raise
          end
          if conn.exec("COMMIT").cmd_status == "ROLLBACK"
            raise TransactionRolledBack, "the transaction was rolled back: a statement in it failed"
          end
          value
        end
      end

      # Takes a connection for the caller alone until it releases the returned Lease: #with for
      # uses that span several calls (an ORM's transaction, begun in one method and committed in
      # another). The lease belongs to no fiber, so #query does not run on it; the holder runs
      # statements on Lease#raw and must call Lease#release.
      # @return [Lease]
      # @raise [PoolTimeout, Weft::DeadlineExceeded] when no connection frees up in time
      def lease
        Deadline.current&.check!
        Trace.event(:lease_ask) if Trace::ON
        connection = interruptible(AT_WAITS) { checkout_pinned }
        Trace.event(:lease_got, connection) if Trace::ON
        Lease.new(self, connection)
      end

      # @api private: Lease's statements wait for their answers here, on the thread itself for
      # up to PROMPT_WAIT while connections are short, before letting the reactor run other
      # fibers (libpq's own wait then goes on as usual).
      #
      # A fiber that waits on its socket is resumed once the reactor has run every fiber that
      # was ready before it, which under load is milliseconds after a short statement's answer
      # came (a tenth of a millisecond on a local server); meanwhile the connection sits unused,
      # for the lease alone. An ActiveRecord transaction makes four such round trips (BEGIN,
      # a validation's query, the insert, COMMIT), each with its turn of the reactor. When
      # callers wait for connections, the connection's time is what limits them, and a poll on
      # the thread costs the reactor less than that: the other fibers wait at most PROMPT_WAIT,
      # and a statement that runs longer gets the usual wait after it.
      # @param raw [PG::Connection] a leased connection with a statement sent
      # @return [void]
      def await_answer(raw)
        return unless connections_short? && Fiber.scheduler && !Fiber.current.blocking?
        give_up = Timers.now + PROMPT_WAIT
        io = raw.socket_io
        loop do
          raw.consume_input
          return unless raw.is_busy
          remaining = give_up - Timers.now
          return unless remaining.positive? && BLOCKING_WAIT.call(io, remaining)
        end
      end

      # @api private: Lease#release gives its connection back here.
      def return_lease(connection, reset_session)
        Trace.event(:lease_release, connection) if Trace::ON
        interruptible(NOWHERE) do
          if reset_session
            reusable = false
            begin
              reusable = restore(connection.raw) && reset_session(connection)
            ensure
              give_back(connection, reusable)
            end
          else
            checkin_pinned(connection, true)
          end
        end
      end

      # @return [Hash] counters: size (open + opening), limit, idle, pinned, shared
      #   (connections carrying pipelined statements), draining (shared ones emptying for callers
      #   waiting to pin: one at most), busy (pinned + shared), waiting (callers waiting for a
      #   connection or slot), in_flight (pipelined statements now), max_depth
      #   (most in flight on one connection so far), queries, pipelined, connects, discarded,
      #   slow_marked (times a statement was found running long and kept apart from then on),
      #   queued_behind_slow (known-slow statements sent behind another one due to end first;
      #   see docs/postgres.md, "Routing"), prepared (named statements #query keeps on the open
      #   connections)
      def statistics
        synchronize do
          pinned = @pinned.size
          shared = @shared.size
          {
            size: @connections.size + @connecting,
            limit: @limit,
            idle: @idle.size,
            pinned: pinned,
            shared: shared,
            draining: @shared.count { |connection| connection.pipeline.draining? },
            busy: pinned + shared,
            waiting: @slot_queue.size + @pin_queue.size,
            in_flight: @shared.sum { |connection| connection.pipeline.depth },
            max_depth: @max_depth,
            queries: @queries,
            pipelined: @pipelined_queries,
            connects: @connects,
            discarded: @discarded,
            slow_marked: @slow_statements.marked,
            queued_behind_slow: @queued_behind_slow,
            prepared: @connections.sum { |connection| connection.statements&.size || 0 },
          }
        end
      end

      # Closes free connections that outlived idle_timeout or max_age. The pool does this
      # by itself whenever connections are taken and given back; call it to do it now.
      # @return [void]
      def reap
        synchronize { reap_idle }
      end

      # Closes every free connection now; the pool stays open and opens new ones when it needs
      # them (as Sequel's Database#disconnect does to its pool). Connections in use are left be.
      # @return [void]
      def close_idle
        synchronize { discard_idle }
        nil
      end

      # Closes every free connection now and the others as they are given back; later calls
      # raise PoolClosed.
      def close
        synchronize do
          @closed = true
          discard_idle
        end
        nil
      end

      # @return [Boolean]
      def closed?
        @closed
      end

      # @return [String] the server address and the limits, for logs and the console
      def inspect
        "#<#{self.class.name} #{@settings.address} limit=#{@limit} pipelining=#{@pipelining}>"
      end

      # --- Called by Pipeline, under the lock ---------------------------------------------

      # @api private: a segment's statements finished, in `seconds` of the server's time (as far
      # as the pipeline can tell it from this process's own delay) from `started`: the pool
      # learns which statements run long (SlowStatements), and the first waiter for a slot looks
      # again, as slots are free on this pipeline and it may no longer carry a slow statement.
      def segment_settled(pipeline, requests, seconds, started)
        unless requests.empty?
          @slow_statements.observe_segment(requests, seconds, started)
          @slow_statements.answered(requests.first.sent_at, pipeline.read_at)
        end
        wake_slot_waiter
      end

      # @api private: the share of its time the reading thread waited for a core lately
      # (SlowStatements#recent_core_wait), for Pipeline#hold_back's guard.
      # @return [Float] 0.0 to 1.0
      def recent_core_wait
        @slow_statements.recent_core_wait
      end

      # @api private: the pipeline takes statements again after a cancel request.
      def pipeline_reopened(_pipeline)
        wake_slot_waiter
      end

      # @api private: nothing is in flight any more; the connection becomes free.
      def pipeline_drained(pipeline)
        connection = pipeline.connection
        return unless @shared.delete(connection)
        pipeline.draining = false
        release(connection)
      end

      # @api private: the connection failed; everything in flight was failed already.
      def connection_lost(pipeline)
        connection = pipeline.connection
        @shared.delete(connection)
        discard(connection)
      end

      # @api private: runs the block with the lock released (to wait on the network), and takes
      # the lock back whatever happens: no exception may strike while that waits, or the code
      # after it would run without the lock.
      def unlocked
        @lock.unlock
        begin
          yield
        ensure
          # A free lock is taken back at once, with no wait for an exception to strike in; only
          # a wait needs the mask (Thread.handle_interrupt makes a Hash of it on every call).
          @lock.try_lock || Thread.handle_interrupt(NOWHERE) { @lock.lock }
        end
      end

      private

      # Whether every connection is in use, none free and no room to open one: callers that
      # come now wait. Read without the lock; a stale answer only costs one statement's choice
      # of wait.
      def connections_short?
        @idle.empty? && !room?
      end

      # The connection this fiber pinned with #with, if any. With nothing pinned (#query's
      # usual case on a shared pool) the fiber-local is not read: a fiber's pin is among
      # @pinned for as long as it holds it.
      def pinned
        return nil if @pinned.empty?
        connection = Thread.current[@pin_key]
        connection if connection && connection.pid == Process.pid && @pinned.include?(connection)
      end

      def reset_state
        @generation = ForkHandler.generation
        @pin_key = :"weft_postgres_pin_#{object_id}"
        @lock = Thread::Mutex.new
        @slot_queue = [] # SlotWaiters of #query callers waiting for a slot, first come first served
        @pin_queue = []  # Tickets of callers waiting to pin, first come first served
        @connections = []
        @idle = []      # free, most recently used last
        @shared = []    # carrying pipelined statements
        @pinned = []
        # Requests answered, for #pipelined to reuse: a Request and its Waiter fewer per
        # statement, taken under the lock without the fiber-local look-up (Thread#[], ~1% of a
        # pipelined statement's CPU on 3.3 + YJIT) that keeping one per fiber cost
        @spare_requests = []
        @connecting = 0
        @queries = 0
        @pipelined_queries = 0
        @max_depth = 0
        @queued_behind_slow = 0
        @connects = 0
        @discarded = 0
      end

      # Takes the lock (after dropping connections inherited across fork) and runs the block,
      # letting exceptions from other threads in at waits only.
      def synchronize(&block)
        interruptible(AT_WAITS) { locked(&block) }
      end

      # #synchronize under whatever the caller lets in (giving a connection back lets in none).
      # The fork check runs on every statement, so it compares ForkHandler.generation rather
      # than calling Process.pid (a system call).
      def locked(&block)
        after_fork if ForkHandler.generation != @generation
        raise PoolClosed, "the pool is closed" if @closed
        @lock.synchronize(&block)
      end

      # Runs the block with exceptions from other threads let in as `mask` says (see
      # AT_WAITS). Under a fiber scheduler they arrive at waits already, as fiber raises, which
      # masks do not hold back; the block just runs.
      def interruptible(mask, &block)
        return yield if Fiber.scheduler && !Fiber.current.blocking?
        Thread.handle_interrupt(mask, &block)
      end

      # In a forked child: the parent's connections are the parent's. Drop them without a word
      # on their sockets and start afresh.
      def after_fork
        inherited = @connections
        reset_state
        inherited.each(&:forget_inherited)
      end

      # --- Shared use ---------------------------------------------------------------------------

      # #query and #query_stateless once the text is told: `role` as StatementScope.transaction_role
      # gives it (:start was refused before).
      def run_query(sql, params, role)
        Deadline.current&.check!
        Trace.event(:query, nil, Trace.tag(sql)) if Trace::ON
        if (connection = pinned)
          return run_pinned(connection, sql, params)
        end
        raise ArgumentError, SESSION_REFUSED if role == :session
        unless @pipelining
          return with do
            synchronize { @queries += 1 }
            connection = pinned
            exec_plain(connection, plain_statement(connection, sql, params), sql, params)
          end
        end
        # A setting or the end of the transaction (role :setting or :end) goes in a segment of
        # its own.
        alone = !role.nil?
        interruptible(AT_WAITS) { shared_query(sql, params, alone) }
      end

      # #query's statement outside a pin: one turn of the lock either takes a free connection
      # (then the statement runs on it outside the lock) or pipelines the statement. #locked
      # written out, with the lock taken and given back here rather than by Mutex#synchronize,
      # whose block Ruby calls from C (a call YJIT cannot compile into its caller).
      def shared_query(sql, params, alone)
        after_fork if ForkHandler.generation != @generation
        raise PoolClosed, "the pool is closed" if @closed
        @lock.lock
        begin
          # (#take_unpressed's first condition asked here: a call saved once connections are shared)
          connection = take_unpressed if @shared.empty?
          result = pipelined(sql, params, alone) unless connection
        ensure
          @lock.unlock
        end
        connection ? run_alone(connection, sql, params) : result
      end

      # A caller of #query waiting for a pipeline slot; `woken` while a wake-up is on its way
      # to it (see #wake_slot_waiter); `since`: when it began to wait (see #release);
      # `long_for`: seconds its statement is known to run on its own (SlowStatements#seconds_alone),
      # nil unless known to run long so (it may queue behind another such, #behind_slow).
      SlotWaiter = Struct.new(:condition, :woken, :since, :long_for)
      private_constant :SlotWaiter

      # A pipeline with a free slot (#free_pipeline). When none has one, the caller waits in
      # line: waiters are served first come, first served, as only the first in line looks
      # when woken. A caller that arrives takes a slot that is free then without queueing:
      # waiters are woken one reactor turn after another, and making every newcomer queue
      # behind them held the pool to one statement per turn while a line lasted. Past
      # acquire_timeout a waiter queues behind a slow statement if a connection carrying one
      # has room (#past_acquire_timeout).
      # @param long_for [Float, nil] seconds the statement is known to run on its own, nil unless
      #   known to run long so (#behind_slow)
      def shared_pipeline(long_for)
        # Most callers find room at once: no line to join, no wake-up to hand on. (#pipelined
        # looks first: nearly all come here only to wait.)
        pipeline = free_pipeline(nil, long_for)
        return pipeline if pipeline

        waiter = nil
        deadline = nil
        served = false
        loop do
          # Not before it waited: the look above found nothing, under the lock held since.
          if waiter && (waiter.woken || @slot_queue.first.equal?(waiter))
            pipeline = free_pipeline(waiter, long_for)
            return pipeline if (served = !pipeline.nil?)
          end

          deadline ||= checkout_deadline
          if deadline&.expired?
            pipeline = past_acquire_timeout(deadline)
            served = true
            return pipeline
          end
          unless waiter
            waiter = SlotWaiter.new(Thread::ConditionVariable.new, false, Timers.now, long_for)
            @slot_queue << waiter
            Trace.event(:slot_wait) if Trace::ON
          end
          waiter.woken = false
          waiter.condition.wait(@lock, deadline&.remaining)
        end
      ensure
        if waiter
          leave_line(@slot_queue, waiter)
          # A waiter that leaves without taking a slot (timed out, cancelled, its deadline
          # passed) hands on the wake-up it may have had; one served does so once it has taken
          # its place (#pipelined).
          pass_slot_on unless served
        end
      end

      # A free connection (it becomes shared), a new one while below the limit, else the least
      # loaded shared connection (Pipeline#load), else, for a statement known to run long, the
      # connection whose own such statement is due to end first (#behind_slow: for a caller
      # that arrives, only while nobody waits in line, whose place it would take); nil when
      # none has room or every one with room carries a statement known to run long.
      #
      # A `waiter` (the first in line) that opens a connection leaves the line first and passes
      # the wake-up on: a connect takes a while (a busy server, a busy reactor, up to
      # connect_timeout), and while it held the line's one wake-up, a connection that came free
      # meanwhile sat unused with callers waiting behind it, who got PoolTimeout.
      def free_pipeline(waiter, long_for)
        if !@idle.empty? && (connection = take_idle)
          return share(connection)
        end
        if room?
          if waiter
            leave_line(@slot_queue, waiter)
            pass_slot_on
          end
          return share(open_connection)
        end

        least_loaded || (queue_behind_slow(long_for) if long_for && (waiter || @slot_queue.empty?))
      end

      # #behind_slow, counted (statistics[:queued_behind_slow]) when found: the caller sends
      # its statement there.
      def queue_behind_slow(long_for)
        pipeline = behind_slow(long_for)
        @queued_behind_slow += 1 if pipeline
        pipeline
      end

      # Whether #free_pipeline would find something now for the first in line (without taking
      # it).
      def slot_free?
        return true if !@idle.empty? || room? || !least_loaded.nil?
        long_for = @slot_queue.first&.long_for
        !long_for.nil? && !behind_slow(long_for).nil?
      end

      # Wakes the first caller waiting for a slot, unless a wake-up is already on its way to
      # it: woken one at a time, it takes its place before the next looks (woken together, they
      # piled onto the one connection that freed up). Called wherever room may have come free.
      #
      # A connection given back for the line (#release) wakes the first waiter not already
      # woken instead (`behind: true`), so that each connection that comes free gets a waiter
      # of its own: waking the first only moved the line one waiter per turn while the other
      # free connections sat unused.
      def wake_slot_waiter(behind: false)
        return if @slot_queue.empty? # (no Enumerable#find on an empty line, see #first_unserved_pin)
        waiter = behind ? @slot_queue.find { |each| !each.woken } : @slot_queue.first
        return if waiter.nil? || waiter.woken

        waiter.woken = true
        waiter.condition.signal
      end

      # Takes a waiter (a SlotWaiter or Ticket) out of its line. Lines are served from the
      # front, so the one leaving is nearly always the first, and otherwise it is found by
      # identity: Array#delete would compare it with #== against every waiter in the line,
      # which for a Struct compares member by member under a recursion guard, and a Rails
      # closed loop keeps ~200 callers in line, so that was ~3% of the server's CPU (the
      # #slot_queue's waiter left on every pipelined statement; bench/results/rails-ruby-3.3.md).
      def leave_line(line, waiter)
        if line.first.equal?(waiter)
          line.shift
        elsif (index = line.index { |each| each.equal?(waiter) })
          line.delete_at(index)
        end
      end

      # Wakes the next waiter if room remains: the chain that serves waiters one after another.
      # With nobody left in line, a connection left free for the line (#release) goes to the
      # callers waiting to pin.
      def pass_slot_on
        if @slot_queue.empty?
          hand_idle_to_pins unless @pin_queue.empty?
        elsif slot_free?
          wake_slot_waiter
        end
      end

      # The caller waited acquire_timeout for a connection with room and without a statement
      # known to run long. Rather than fail, it queues behind such a statement on the
      # connection with the fewest in flight, as it would on a pool without routing; it gets
      # PoolTimeout only when no connection has room at all (at pipeline_depth, draining,
      # fenced), and DeadlineExceeded when its own deadline is what passed.
      def past_acquire_timeout(deadline)
        ambient = Deadline.current
        unless ambient && ambient.at <= deadline.at
          pipeline = @shared.map(&:pipeline).select { |each| each.room?(@pipeline_depth) }.min_by(&:depth)
          return pipeline if pipeline
        end
        checkout_expired(deadline)
      end

      # While no connection is shared and nobody waits, a statement gets a free connection to
      # itself: a plain round trip costs less than the pipeline's bookkeeping, and nothing can
      # queue behind a slow statement. Pipelining starts once connections run short.
      #
      # Not the connection whose pipeline has just emptied while the callers its last answer
      # woke are still to run (Pipeline#callers_returning?): its reader, resumed first, took it
      # alone, and they came back to a pool with no connection to share, waited in the slot
      # line and were let through one reactor turn after another, each statement in a segment
      # of its own. That happened whenever every answer in flight was read at once, which on a
      # loaded machine (the process waiting for a core while the server answered) was often:
      # bench/results/postgres-ruby-3.3.md, "Segment hold under load".
      def take_unpressed
        return nil unless @shared.empty? && @slot_queue.empty? && @pin_queue.empty?
        return nil if @idle.last&.pipeline&.callers_returning?
        connection = take_idle || (open_connection if room?)
        return nil unless connection
        connection.exit_pipeline_mode
        @pinned << connection
        @queries += 1
        connection
      end

      # Sends the statement down a shared connection and waits for its result (under the lock).
      # One seen running long goes in a segment of its own, and nothing follows it down its
      # connection until it ends (Pipeline#stalled?). One sent `alone` (a setting or the end of
      # the transaction: #query) goes in a segment of its own too, whose implicit transaction is
      # then its own; statements follow it as usual.
      def pipelined(sql, params, alone)
        request = @spare_requests.pop&.reset(sql, params) || Request.new(sql, params)
        request.alone = true if alone
        if (slow = @slow_statements.slow?(sql))
          request.slow = true
          request.alone = true
        end
        long_for = @slow_statements.seconds_alone(sql) if slow
        # Most callers find room at once (#shared_pipeline's first look, asked here first: a
        # call saved on every statement)
        pipeline = free_pipeline(nil, long_for) || shared_pipeline(long_for)
        begin
          pipeline.submit(request)
        ensure
          # now that this statement took its place (the call saved when nobody waits in line)
          pass_slot_on unless @slot_queue.empty? && @pin_queue.empty?
        end
        Trace.event(:submit, pipeline.connection, "#{request.object_id}#{'/slow' if request.slow}") if Trace::ON
        @queries += 1
        @pipelined_queries += 1
        depth = pipeline.depth
        @max_depth = depth if depth > @max_depth
        result = pipeline.await(request)
        # Answered, it is out of every pipeline and holds nothing: the next statement of any
        # caller reuses it (one that raised, abandoned or not, is left to the garbage collector).
        # Up to what can be in flight: a caller makes its Request before it waits for room, and
        # a burst of 20,000 callers left as many kept (4 MB) on a pool of 10 connections.
        @spare_requests << request if @spare_requests.size < @spare_requests_kept
        Trace.event(:done, pipeline.connection) if Trace::ON
        result
      end

      # A statement on a free connection of its own. The pool learns from its time on the
      # server, up to when its answer can have arrived (ServerTime), not up to when this fiber
      # got round to reading it.
      def run_alone(connection, sql, params)
        clean = false
        Trace.event(:alone, connection) if Trace::ON
        started = nil
        result = interruptible(ANYWHERE) do
          statement = plain_statement(connection, sql, params)
          started = Timers.now # after the Parse's round trip, if any: ServerTime takes one wait
          exec_plain(connection, statement, sql, params)
        end
        clean = true
        # When the reactor cannot tell, the statement counts as short (the pool's bias).
        ready = ServerTime.ready_after(started)
        read_at = Timers.now
        @lock.synchronize do
          @slow_statements.observe(sql, ready ? ready - started : 0.0, started)
          @slow_statements.answered(started, read_at)
        end
        Trace.event(:done, connection) if Trace::ON
        result
      ensure
        interruptible(NOWHERE) { checkin_pinned(connection, clean) }
      end

      # A statement on the connection this fiber pinned. The fiber keeps the connection after
      # an interruption (it may rescue and go on inside #with), so a statement still running
      # then is cancelled here, before the error goes on; if that fails, #checkin_pinned sees
      # to the connection when the pin ends.
      def run_pinned(connection, sql, params)
        synchronize { @queries += 1 }
        exec_plain(connection, plain_statement(connection, sql, params), sql, params)
      rescue Exception # rubocop:disable Lint/RescueException
        begin
          stop_running(connection.raw, Deadline.after(RESET_GRACE))
        rescue PG::Error, IOError, SystemCallError
          nil # the caller's own error says more
        end
        raise
      end

      # Runs the block in a savepoint of the transaction open on the pinned connection. Nested
      # savepoints are named by their depth (weft_1, weft_2...), so an inner one never shadows
      # one still open around it.
      def in_savepoint(connection)
        raw = connection.raw
        name = "weft_#{connection.savepoint_depth + 1}"
        raw.exec("SAVEPOINT #{name}")
        connection.savepoint_depth += 1
        released = false
        begin
          value = yield
          if raw.transaction_status == PG::PQTRANS_INERROR
            raise TransactionRolledBack, "the savepoint was rolled back: a statement in it failed"
          end

          raw.exec("RELEASE SAVEPOINT #{name}")
          released = true
          value
        ensure
          connection.savepoint_depth -= 1
          # An error, an interruption or an early exit (break, throw) from the block.
          roll_back_to(raw, name) unless released
        end
      end

      # Undoes a savepoint's work and leaves the enclosing transaction usable. A statement
      # still running (the block was interrupted) is cancelled first. If that cannot be done,
      # the transaction stays as it is: its own end rolls it back, or the pool closes the
      # connection when it is given back.
      def roll_back_to(raw, name)
        return unless stop_running(raw, Deadline.after(RESET_GRACE))
        raw.exec("ROLLBACK TO SAVEPOINT #{name}")
        raw.exec("RELEASE SAVEPOINT #{name}")
      rescue PG::Error, IOError, SystemCallError
        nil # the block's own error says more
      end

      # The named statement a statement on a connection in plain mode held by the caller runs
      # as (PreparedStatements#plain_statement: inside a transaction block too, where only what
      # cannot fail for the cache's own reasons is named), prepared now if need be; nil
      # (unnamed) when the pool prepares none.
      # @return [PreparedStatements::Statement, nil]
      def plain_statement(connection, sql, params)
        connection.statements&.plain_statement(connection.raw, sql, params)
      end

      # Runs a statement on a connection in plain mode held by the caller, as `statement`
      # (#plain_statement) or unnamed (through the connection's PreparedStatements, which
      # forgets what an unnamed DEALLOCATE or DISCARD ALL deallocated).
      def exec_plain(connection, statement, sql, params)
        statements = connection.statements
        return connection.raw.exec_params(sql, params) unless statements
        statements.exec(connection.raw, statement, sql, params)
      end

      # The option of .new: false, nil or 0 for none, true for the default.
      def prepared_statements_limit(option)
        case option
        when false, nil, 0 then nil
        when true then PreparedStatements::DEFAULT_LIMIT
        when Integer
          raise ArgumentError, "prepared_statements must not be negative" if option.negative?
          option
        else raise ArgumentError, "prepared_statements must be an Integer, true or false"
        end
      end

      def share(connection)
        connection.enter_pipeline_mode
        connection.pipeline ||= Pipeline.new(connection, @lock, self, @settings.address)
        @shared << connection
        connection.pipeline
      end

      # The deadline a checkout that has to wait runs under: acquire_timeout from now or the
      # caller's deadline, whichever comes first (nil: neither, wait as long as it takes).
      def checkout_deadline
        Deadline.within(@acquire_timeout)
      end

      # For a statement known to run long, when every connection is in use and none can take
      # it otherwise (each carries such a statement, or is draining or full): the connection
      # whose known-slow statement, alone on it, is due to end first, going by how long that
      # statement took when last seen (SlowStatements#seconds). The statement queues behind it
      # in a segment of its own, so the server starts it the moment the one ahead ends. Waiting
      # in line instead, it would wait for the same moment and then some: the answer ahead is
      # read, the connection given back, and a waiter woken to send a statement, each when the
      # reactor comes round to it, a few milliseconds of a busy reactor during which the
      # connection idles (the Rails benchmark's sleeps, one ending on some connection every
      # few milliseconds; bench/results/rails-trace.md). One statement at most waits behind
      # another, so a connection is never committed further ahead than that; none waits behind
      # one due to run on for clearly longer than it runs itself, over SAME_LENGTH times (a
      # statement marked slow by mistake, or a shorter one, would wait far longer there than
      # in line; the margin is for the few percent by which one statement's known time moves
      # between runs: compared exactly, a statement was refused a place behind its own SQL
      # whenever that had last run 4 ms longer), or that has run over twice its known time (it
      # may run much longer this time: waiting for whichever connection frees first is the
      # better bet then), or whose caller left (it is being cancelled).
      # @param long_for [Float] seconds the statement to send is known to run
      # @return [Pipeline, nil]
      def behind_slow(long_for)
        now = Timers.now
        best = nil
        best_end = nil
        @shared.each do |connection|
          pipeline = connection.pipeline
          ahead = pipeline.lone_slow or next
          seconds = @slow_statements.seconds(ahead.sql) or next
          started = pipeline.segment_start(ahead)
          next if now - started > 2 * seconds || started + seconds - now > SAME_LENGTH * long_for
          if best.nil? || started + seconds < best_end
            best = pipeline
            best_end = started + seconds
          end
        end
        best
      end

      # The pipeline with the least Pipeline#load, the first of them if several. Called for every
      # pipelined statement, so it looks for the shallowest pipeline first (Pipeline#open_depth:
      # Integers only) and checks only that one for a stall: not stalled, its load is its depth,
      # and every other pipeline's is at least its own depth, so it is the one. Loops without a
      # block (Array#each calls its block from C, once per connection).
      def least_loaded
        shared = @shared
        limit = @pipeline_depth
        best = nil
        best_depth = nil
        index = 0
        while index < shared.size
          pipeline = shared[index].pipeline
          index += 1
          depth = pipeline.open_depth(limit) or next
          if best.nil? || depth < best_depth
            best = pipeline
            best_depth = depth
          end
        end
        return best if best.nil?

        now = Timers.now
        best.stalled?(now, STALL_AFTER) ? least_loaded_stalled(now) : best
      end

      # #least_loaded when the shallowest pipeline is stalled: a stalled pipeline's load counts
      # `pipeline_depth` more (Pipeline#load).
      def least_loaded_stalled(now)
        best = nil
        best_load = nil
        @shared.each do |connection|
          pipeline = connection.pipeline
          load = pipeline.load(now, @pipeline_depth, STALL_AFTER) or next
          if best.nil? || load < best_load
            best = pipeline
            best_load = load
          end
        end
        best
      end

      # --- Pinned use ---------------------------------------------------------------------------

      # A caller waiting to pin; a connection given back is handed straight to the first one,
      # so callers that keep coming back cannot overtake those already waiting. `since`: when
      # it began to wait (see #release).
      Ticket = Struct.new(:condition, :connection, :since)
      private_constant :Ticket

      # A free connection goes to the caller at once unless a caller still waits unserved
      # (first come, first served). Callers that were handed a connection and have not run yet
      # to take it do not count: a connection given back meanwhile finds nobody unserved and
      # becomes free, and a caller queued behind them would wait for a later one while it sat
      # free (#release hands over only the connection being given back).
      def checkout_pinned
        synchronize do
          connection = (take_idle unless unserved_pins?) || (open_connection if room?) || wait_for_connection
          connection.exit_pipeline_mode
          @pinned << connection
          connection
        end
      end

      # All connections are busy: stop feeding one shared connection so that it empties, and
      # wait for a connection to be handed over. If the emptying connection has nobody reading
      # its results (its callers left), read them here. A waiter that leaves, served or not,
      # wakes the next one still waiting, which sees to the next connection to drain.
      def wait_for_connection
        deadline = checkout_deadline
        ticket = Ticket.new(Thread::ConditionVariable.new, nil, Timers.now)
        @pin_queue << ticket
        Trace.event(:lease_queued) if Trace::ON
        taken = false
        begin
          until ticket.connection
            if room?
              # It opens one of its own, and waits for nothing else: a connection given back
              # meanwhile goes to the next caller (handed to this one, it would sit unused
              # until the connect was done).
              leave_line(@pin_queue, ticket)
              wake_pin_waiter
              return (taken = open_connection)
            end

            checkout_expired(deadline) if deadline&.expired?
            if (orphan = pipeline_to_drain)
              drain(orphan, deadline)
            else
              ticket.condition.wait(@lock, deadline&.remaining)
            end
          end
          taken = ticket.connection
        ensure
          leave_line(@pin_queue, ticket)
          release(ticket.connection) if ticket.connection && !taken.equal?(ticket.connection)
          wake_pin_waiter
        end
      end

      # While callers wait to pin and none has been handed a connection, one shared connection
      # at a time is drained for them, the one likely to empty soonest (not stalled on a long
      # statement, then the fewest statements in flight); the others go on carrying pipelined
      # statements. (A connection draining for each waiter took most of them out of the
      # pipeline under a steady stream of leases: the Rails benchmark fell to 59 requests/s.)
      # A connection still draining when nobody waits any more drains to the end (a waiter may
      # be reading it out, and would read for ever if it took statements again) and becomes
      # free. Returns the draining one if nobody is reading it.
      def pipeline_to_drain
        return nil unless unserved_pins?

        pipelines = @shared.map(&:pipeline)
        draining = pipelines.find(&:draining?)
        unless draining
          now = Timers.now
          draining = pipelines.min_by { |pipeline| [pipeline.stalled?(now, STALL_AFTER) ? 1 : 0, pipeline.depth] }
          draining&.draining = true
          Trace.event(:drain, draining.connection) if Trace::ON && draining
        end
        draining unless draining.nil? || draining.reading?
      end

      def unserved_pins?
        !first_unserved_pin.nil?
      end

      # Wakes the first caller waiting to pin that has no connection yet.
      def wake_pin_waiter
        first_unserved_pin&.condition&.signal
      end


      # Reads out a draining pipeline whose callers all left, for as long as the deadline allows.
      def drain(pipeline, deadline)
        checkout_expired(deadline) unless pipeline.await_empty(deadline)
      end

      # Gives back a pinned connection. A connection given back while its statement still runs
      # (the caller was interrupted: a deadline, a cancellation) is made usable in the
      # background, since cancelling on the server takes a round trip to it and the caller
      # should not wait; one left in a transaction is rolled back here (one quick round trip).
      def checkin_pinned(connection, clean)
        raw = connection.raw
        if clean && raw.transaction_status == PG::PQTRANS_IDLE
          give_back(connection, true)
        elsif raw.transaction_status == PG::PQTRANS_ACTIVE
          Background.run("weft-postgres cancel") { restore_and_give_back(connection) }
        else
          restore_and_give_back(connection)
        end
      end

      # The connection goes back to the pool in any case: closed if it could not be restored,
      # or if restoring it was interrupted (a task cancelled while it cleans up).
      def restore_and_give_back(connection)
        reusable = false
        reusable = restore(connection.raw)
      ensure
        give_back(connection, reusable)
      end

      def give_back(connection, reusable)
        locked do
          @pinned.delete(connection)
          reusable ? release(connection) : discard(connection)
        end
      rescue PoolClosed
        connection.close
      end

      # Makes a connection given back mid-statement or mid-transaction usable again: cancels
      # the running statement, reads what is left, rolls back. The waits are bounded by
      # RESET_GRACE (the cancel request by connect_timeout).
      # @return [Boolean] whether it worked
      def restore(raw)
        return false if raw.finished? || raw.status != PG::CONNECTION_OK
        deadline = Deadline.after(RESET_GRACE)
        return false unless stop_running(raw, deadline)
        unless raw.transaction_status == PG::PQTRANS_IDLE
          raw.send_query("ROLLBACK")
          return false unless discard_results(raw, deadline)
        end
        raw.transaction_status == PG::PQTRANS_IDLE
      rescue PG::Error, IOError, SystemCallError
        false
      end

      # Clears what a lease holder left in the session (the pool's named statements too) and
      # sets it up as a new connection.
      # @return [Boolean] whether it worked
      def reset_session(connection)
        raw = connection.raw
        connection.statements&.clear # DISCARD ALL deallocates them
        raw.exec("DISCARD ALL")
        @on_connect&.call(raw)
        true
      rescue PG::Error, IOError, SystemCallError
        false
      end

      # If a statement still runs on the connection, asks the server to cancel it (again every
      # Pipeline::CANCEL_REPEAT seconds) and reads what it still sends.
      # @return [Boolean] false if it had not ended by the deadline
      def stop_running(raw, deadline)
        while raw.transaction_status == PG::PQTRANS_ACTIVE
          return false if deadline.expired?
          raw.cancel # pg's cancel waits on sockets, so the reactor keeps turning
          discard_results(raw, Deadline.earliest(Deadline.after(Pipeline::CANCEL_REPEAT), deadline))
        end
        true
      end

      # Reads and throws away results until the statement in progress has sent all of them,
      # waiting on the socket no longer than the deadline allows (no Timeout: an exception
      # raised from another thread could land outside the code meant to catch it).
      # @return [Boolean] false if the deadline passed first
      # @raise [PG::Error] when a COPY is in progress: libpq answers get_result with the COPY's
      #   result again for as long as it lasts (a COPY FROM STDIN waits for data that will not
      #   come), so it cannot be read to its end; the connection is closed instead
      def discard_results(raw, deadline)
        loop do
          raw.consume_input
          until raw.is_busy
            result = raw.get_result or return true # not busy: returns at once
            status = result.result_status
            result.clear
            raise PG::Error, "a COPY was left in progress" if COPY_STATUSES.include?(status)
          end
          return false if deadline.expired?
          raw.socket_io.wait_readable(deadline.remaining)
        end
      end

      # --- Connections --------------------------------------------------------------------------

      def room?
        @connections.size + @connecting < @limit
      end

      # Opens a connection for the caller; counts it toward the limit meanwhile.
      #
      # The connect runs in the background (Background.run), with the lock released, and the
      # caller waits for it. A caller's deadline or cancellation ends only the caller's wait:
      # the connect goes on, bounded by connect_timeout, and a connection the caller no longer
      # wants joins the idle ones for the next caller. Connecting in the caller's own fiber
      # tied every connect to that caller's deadline: after PostgreSQL restarted under load,
      # each request under a 50 ms deadline began a connect that took longer than that on the
      # busy machine, gave it up half-made, and the next request began another. The pool never
      # got a connection back while the load lasted (bench/results/ringpool-notes.md), and the
      # abandoned connects took the CPU the shards' requests needed.
      def open_connection
        @connecting += 1
        attempt = ConnectAttempt.new(Promise.new, false)
        Background.run("weft-postgres connect") { connect_in_background(attempt, @generation) }
        begin
          unlocked { attempt.promise.wait }
        rescue Exception # rubocop:disable Lint/RescueException
          # Given up (deadline, cancel) or the connect failed. Holding the lock again, this and
          # #connect_in_background settle the connection's fate in one order or the other.
          attempt.abandoned = true
          release(attempt.promise.wait) if attempt.promise.fulfilled?
          raise
        end
      end

      # One connect of #open_connection: its promise, and whether its caller stopped waiting.
      ConnectAttempt = Struct.new(:promise, :abandoned)

      # The background half of #open_connection. `generation` is the fork generation the
      # connect began in: in a child forked meanwhile the pool started afresh without it.
      def connect_in_background(attempt, generation)
        connection = Connection.open(@settings, @connector)
        connection.statements = PreparedStatements.new(@prepared_limit) if @prepared_limit
        @on_connect&.call(connection.raw)
      rescue Exception => e # rubocop:disable Lint/RescueException
        connection&.close
        @lock.synchronize do
          next if generation != @generation
          @connecting -= 1
          wake_slot_waiter
          wake_pin_waiter
          attempt.promise.reject(e) unless attempt.abandoned
        end
        raise unless e.is_a?(StandardError) # cancelled: the reactor is stopping
      else
        @lock.synchronize do
          next connection.close if generation != @generation
          @connecting -= 1
          @connects += 1
          @connections << connection
          attempt.abandoned ? release(connection) : attempt.promise.fulfill(connection)
        end
      end

      # The most recently used free connection that is still alive and young enough (one given
      # back within JUST_USED is taken as alive).
      def take_idle
        reap_idle
        while (connection = @idle.pop)
          alive = connection.idle_time < JUST_USED ? !connection.broken? : connection.usable?
          return connection if alive && !expired?(connection)
          discard(connection)
        end
        nil
      end

      # A connection given back goes to whoever has waited longest: the first caller waiting
      # to pin, or, if the first caller waiting for a slot came before it, the slot line (it
      # becomes free, and that caller is woken to take it). Handing every connection to the
      # callers waiting to pin while there were any starved the slot line: under a stream of
      # leases (a Rails app's transactions) on a busy reactor, where each hand-over waits a
      # turn, all connections went round the leases for seconds, and callers of #query (a
      # request's other statements) got PoolTimeout after acquire_timeout, with the
      # connections counted neither pinned nor shared as they were on their way to the next
      # lease ("2 pinned, 0 shared, 250 waiting" for a limit of 5).
      def release(connection)
        connection.released_at = Timers.now
        if @closed || expired?(connection)
          discard(connection)
        elsif (ticket = first_unserved_pin) && !slot_line_first?(ticket)
          ticket.connection = connection
          ticket.condition.signal
        else
          @idle << connection
          wake_slot_waiter(behind: true)
        end
      end

      def first_unserved_pin
        # Not Enumerable#find on an empty line: it makes two internal objects (its C block and
        # its result's box) per call, and #release asks whenever a pipeline empties.
        return nil if @pin_queue.empty?
        @pin_queue.find { |ticket| ticket.connection.nil? }
      end

      # Whether the first caller waiting for a slot began to wait before `ticket`'s caller.
      def slot_line_first?(ticket)
        (first = @slot_queue.first) && first.since < ticket.since
      end

      # Free connections go to the callers waiting to pin, first come first served (a
      # connection left free for the slot line when the line has gone).
      def hand_idle_to_pins
        while (ticket = first_unserved_pin) && (connection = take_idle)
          ticket.connection = connection
          ticket.condition.signal
        end
      end

      def discard_idle
        @idle.dup.each { |connection| discard(connection) } # discard deletes from @idle
      end

      def discard(connection)
        @idle.delete(connection)
        @shared.delete(connection)
        return unless @connections.delete(connection)
        @discarded += 1
        connection.close
        wake_pin_waiter # room for a new connection (or the one draining is gone)
        wake_slot_waiter
      end

      def expired?(connection)
        @max_age && connection.outlived?(@max_age)
      end

      # Free connections are kept oldest-released first.
      def reap_idle
        while (oldest = @idle.first) &&
              ((@idle_timeout && oldest.idle_time > @idle_timeout) || expired?(oldest))
          discard(oldest)
        end
      end

      # A checkout ran out of time: the caller's deadline (DeadlineExceeded, as everywhere
      # else under it) or the pool's acquire_timeout (PoolTimeout).
      def checkout_expired(deadline)
        ambient = Deadline.current
        raise DeadlineExceeded, ambient.message if ambient && ambient.at <= deadline.at

        raise PoolTimeout, "no PostgreSQL connection free within #{@acquire_timeout}s " \
                           "(pool limit #{@limit}, #{@pinned.size} pinned, #{@shared.size} shared, " \
                           "#{@slot_queue.size + @pin_queue.size} waiting)#{ALL_PINNED if @pinned.size >= @limit}"
      end

      # What PoolTimeout adds when every connection was pinned: nothing was shared to pipeline
      # onto, and the way out is the application's, which a bare count does not say (an
      # ActiveRecord adapter kept leased after a migration held the one connection of a pool of
      # one, and every other fiber's statement timed out).
      ALL_PINNED = ": every connection is held for a transaction, a #with or #lease block, or " \
                   "session state (SET, an advisory lock, LISTEN) until it is given back; end those " \
                   "sooner, or raise the pool's limit or acquire_timeout"
    end
  end
end
