# frozen_string_literal: true

require "timeout"
require "pg"
require_relative "errors"
require_relative "settings"
require_relative "connection"
require_relative "pipeline"
require_relative "request"
require_relative "../timers"

module Weft
  module Postgres
    # A fiber-aware PostgreSQL connection pool that pipelines single statements automatically.
    #
    #   pool = Weft::Postgres::Pool.new(ENV["DATABASE_URL"], size: 8)
    #   pool.query("select name from users where id = $1", id) # => PG::Result
    #   pool.with { |conn| conn.exec("set search_path to app"); conn.exec("...") }
    #   pool.transaction { |conn| conn.exec_params("insert ...", [...]) }
    #
    # `query` runs a statement alone on a free connection while connections are plentiful; once
    # they run short it shares them: many fibers' statements travel on one connection at once in
    # libpq pipeline mode (see Pipeline), up to `pipeline_depth` in flight per connection.
    # `with` and `transaction` pin a connection for the caller alone (session state, several
    # statements in one transaction); a pinned connection is out of the shared set until it is
    # given back.
    #
    # Connections are opened lazily up to `size`, checked for life before reuse, closed past
    # `max_lifetime` or `idle_timeout`, replaced when broken, and never shared across fork.
    # The pool is safe to use from many fibers and from many threads.
    class Pool
      # Statements in flight on one shared connection, at most.
      DEFAULT_PIPELINE_DEPTH = 64
      # A shared connection whose head statement has run this long (seconds) is avoided while
      # another has room: the statements behind it would wait for it. Short statements take
      # well under a millisecond on a healthy server; 2 ms did better than 10 ms in the
      # benchmark with a slow statement every N requests.
      STALL_AFTER = 0.002
      # Seconds a connection given back after an interrupted statement may take to be made
      # usable again (cancel, drain, rollback) before it is closed instead.
      RESET_GRACE = 2.0
      # What Pool#query refuses: a transaction on a shared connection would swallow the
      # statements of every caller behind it.
      TRANSACTION_START = /\A\s*(?:begin|start\s+transaction)\b/i

      # @return [Integer] the most connections the pool opens
      attr_reader :size
      # @return [Settings]
      attr_reader :settings

      # @param target [String, Hash, nil] URL, conninfo string or Hash of libpq parameters;
      #   nil means DATABASE_URL (or libpq's PG* environment defaults)
      # @param size [Integer] connections at most (default: WEFT_PG_POOL_SIZE or 10)
      # @param pipelining [Boolean] share connections for #query in pipeline mode (needs libpq
      #   14 or newer; off otherwise)
      # @param pipeline_depth [Integer] statements in flight per shared connection, at most
      # @param checkout_timeout [Numeric] seconds to wait for a connection or a pipeline slot
      #   before raising PoolTimeout
      # @param connect_timeout [Numeric] seconds to wait for the server when connecting
      # @param statement_timeout [Numeric, nil] seconds; the server cancels longer statements
      # @param max_lifetime [Numeric, nil] seconds after which a connection is closed once free
      # @param idle_timeout [Numeric, nil] seconds a free connection may stay unused
      # @param application_name [String, nil] shown in pg_stat_activity
      # @param on_connect [#call, nil] called with each new PG::Connection (type maps, SETs)
      def initialize(target = nil, size: Integer(ENV.fetch("WEFT_PG_POOL_SIZE", 10)), pipelining: true,
                     pipeline_depth: DEFAULT_PIPELINE_DEPTH, checkout_timeout: 5.0,
                     connect_timeout: Settings::DEFAULT_CONNECT_TIMEOUT, statement_timeout: nil,
                     max_lifetime: nil, idle_timeout: 300, application_name: "weft", on_connect: nil)
        raise ArgumentError, "size must be a positive Integer" unless size.is_a?(Integer) && size.positive?
        unless pipeline_depth.is_a?(Integer) && pipeline_depth.positive?
          raise ArgumentError, "pipeline_depth must be a positive Integer"
        end

        @settings = Settings.new(target, connect_timeout: connect_timeout, statement_timeout: statement_timeout,
                                         application_name: application_name)
        @size = size
        @pipelining = pipelining && Postgres.pipelining_supported?
        @pipeline_depth = pipeline_depth
        @checkout_timeout = checkout_timeout
        @max_lifetime = max_lifetime
        @idle_timeout = idle_timeout
        @on_connect = on_connect
        @closed = false
        reset_state
      end

      # @return [Boolean] whether #query shares connections in pipeline mode
      def pipelining?
        @pipelining
      end

      # Runs one statement and returns its result. With pipelining on, the statement shares a
      # connection with other callers' statements; otherwise it takes a connection for itself.
      # A fiber's own statements run in the order it issues them.
      #
      # @param sql [String] one statement; `$1`, `$2`... refer to params
      # @param params [Array] values for the placeholders (nil is NULL; others are sent as text)
      # @return [PG::Result]
      # @raise [PG::Error] the statement's error, for this caller only
      # @raise [PoolTimeout] when no connection or pipeline slot frees up in time
      # @raise [ConnectionError] when the server cannot be reached or the connection is lost
      def query(sql, *params)
        raise ArgumentError, "Pool#query cannot open a transaction; use Pool#transaction" if sql.match?(TRANSACTION_START)
        unless @pipelining && !pinned
          return with do |conn|
            synchronize { @queries += 1 }
            conn.exec_params(sql, params)
          end
        end
        if (connection = synchronize { take_unpressed })
          return run_alone(connection, sql, params)
        end

        request = Request.new(sql, params)
        synchronize do
          pipeline = shared_pipeline
          pipeline.submit(request)
          @queries += 1
          @pipelined_queries += 1
          depth = pipeline.depth
          @max_depth = depth if depth > @max_depth
          pipeline.await(request)
        end
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
      def with
        if (connection = pinned)
          return yield connection.raw
        end

        connection = checkout_pinned
        clean = false
        Thread.current[@pin_key] = connection # fiber-local
        begin
          value = yield connection.raw
          clean = true
          value
        ensure
          Thread.current[@pin_key] = nil
          checkin_pinned(connection, clean)
        end
      end

      # Runs the block in a transaction on a pinned connection: commits when the block returns,
      # rolls back when it raises or its task is cancelled; the connection stays usable.
      # @yieldparam conn [PG::Connection]
      # @return the block's value
      # @raise [TransactionRolledBack] when COMMIT found the transaction already failed (an
      #   error inside the block was rescued)
      #
      # Called inside another #transaction (or a #with block that began one), it joins the
      # enclosing transaction.
      def transaction
        with do |conn|
          next yield(conn) unless conn.transaction_status == PG::PQTRANS_IDLE

          conn.exec("BEGIN")
          begin
            value = yield conn
          rescue Exception # rubocop:disable Lint/RescueException
            restore(conn) # roll back now: the caller may rescue and go on using the connection
            raise
          end
          if conn.exec("COMMIT").cmd_status == "ROLLBACK"
            raise TransactionRolledBack, "the transaction was rolled back: a statement in it failed"
          end
          value
        end
      end

      # @return [Hash] counters: size (open + opening), max_size, idle, pinned, shared
      #   (connections carrying pipelined statements), busy (pinned + shared), waiting (callers
      #   waiting for a connection or slot), in_flight (pipelined statements now), max_depth
      #   (most in flight on one connection so far), queries, pipelined, connects, discarded
      def statistics
        synchronize do
          pinned = @pinned.size
          shared = @shared.size
          {
            size: @connections.size + @connecting,
            max_size: @size,
            idle: @idle.size,
            pinned: pinned,
            shared: shared,
            busy: pinned + shared,
            waiting: @waiting + @pin_queue.size,
            in_flight: @shared.sum { |connection| connection.pipeline.depth },
            max_depth: @max_depth,
            queries: @queries,
            pipelined: @pipelined_queries,
            connects: @connects,
            discarded: @discarded,
          }
        end
      end

      # Closes free connections that outlived idle_timeout or max_lifetime. The pool does this
      # by itself whenever connections are taken and given back; call it to do it now.
      # @return [void]
      def reap
        synchronize { reap_idle }
      end

      # Closes every free connection now and the others as they are given back; later calls
      # raise PoolClosed.
      def close
        synchronize do
          @closed = true
          @idle.each { |connection| discard(connection) }
        end
        nil
      end

      # @return [Boolean]
      def closed?
        @closed
      end

      def inspect
        "#<#{self.class.name} #{@settings.address} size=#{@size} pipelining=#{@pipelining}>"
      end

      # --- Called by Pipeline, under the lock ---------------------------------------------

      # @api private: a statement finished, so a slot is free on this pipeline.
      def slot_freed(_pipeline)
        @slot_freed.signal if @waiting.positive?
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

      private

      # The connection this fiber pinned with #with, if any.
      def pinned
        connection = Thread.current[@pin_key]
        connection if connection && connection.pid == Process.pid && @pinned.include?(connection)
      end

      def reset_state
        @pid = Process.pid
        @pin_key = :"weft_postgres_pin_#{object_id}"
        @lock = Thread::Mutex.new
        @slot_freed = Thread::ConditionVariable.new     # a pipeline slot or connection came free
        @pin_queue = [] # Tickets of callers waiting to pin, first come first served
        @connections = []
        @idle = []      # free, most recently used last
        @shared = []    # carrying pipelined statements
        @pinned = []
        @connecting = 0
        @waiting = 0
        @queries = 0
        @pipelined_queries = 0
        @max_depth = 0
        @connects = 0
        @discarded = 0
      end

      # Takes the lock (after dropping connections inherited across fork) and runs the block.
      def synchronize(&block)
        after_fork if Process.pid != @pid
        raise PoolClosed, "the pool is closed" if @closed
        @lock.synchronize(&block)
      end

      # In a forked child: the parent's connections are the parent's. Drop them without a word
      # on their sockets and start afresh.
      def after_fork
        inherited = @connections
        reset_state
        inherited.each(&:forget_inherited)
      end

      # Runs the block with the lock released (to wait on the network).
      def unlocked
        @lock.unlock
        begin
          yield
        ensure
          @lock.lock
        end
      end

      # --- Shared use ---------------------------------------------------------------------------

      # A pipeline with a free slot: a free connection if there is one, a new one while below
      # size, else the least loaded shared connection; waits when all are full.
      def shared_pipeline
        deadline = Timers.now + @checkout_timeout
        loop do
          if (connection = take_idle)
            return share(connection)
          end
          return share(open_connection) if room?

          pipeline = least_loaded
          return pipeline if pipeline

          wait_for_slot(@slot_freed, deadline)
        end
      end

      # While no connection is shared and nobody waits, a statement gets a free connection to
      # itself: a plain round trip costs less than the pipeline's bookkeeping, and nothing can
      # queue behind a slow statement. Pipelining starts once connections run short.
      def take_unpressed
        return nil unless @shared.empty? && @waiting.zero? && @pin_queue.empty?
        connection = take_idle || (open_connection if room?)
        return nil unless connection
        connection.exit_pipeline_mode
        @pinned << connection
        @queries += 1
        connection
      end

      def run_alone(connection, sql, params)
        clean = false
        result = connection.raw.exec_params(sql, params)
        clean = true
        result
      ensure
        checkin_pinned(connection, clean)
      end

      def share(connection)
        connection.enter_pipeline_mode
        connection.pipeline ||= Pipeline.new(connection, @lock, self, @settings.address)
        @shared << connection
        @slot_freed.broadcast if @waiting.positive? # room for up to pipeline_depth of them
        connection.pipeline
      end

      def least_loaded
        now = Timers.now
        best = nil
        best_load = nil
        @shared.each do |connection|
          pipeline = connection.pipeline
          next if pipeline.fenced? || pipeline.draining? || pipeline.depth >= @pipeline_depth
          load = pipeline.depth
          load += @pipeline_depth if pipeline.head_age(now) > STALL_AFTER
          if best.nil? || load < best_load
            best = pipeline
            best_load = load
          end
        end
        best
      end

      # --- Pinned use ---------------------------------------------------------------------------

      # A caller waiting to pin; a connection given back is handed straight to the first one,
      # so callers that keep coming back cannot overtake those already waiting.
      Ticket = Struct.new(:condition, :connection)
      private_constant :Ticket

      def checkout_pinned
        synchronize do
          connection = (take_idle if @pin_queue.empty?) || (open_connection if room?) || wait_for_connection
          connection.exit_pipeline_mode
          @pinned << connection
          connection
        end
      end

      # All connections are busy: stop feeding one shared connection so that it empties, and
      # wait for a connection to be handed over. If the emptying connection has nobody reading
      # its results (its callers left), read them here.
      def wait_for_connection
        deadline = Timers.now + @checkout_timeout
        ticket = Ticket.new(Thread::ConditionVariable.new, nil)
        @pin_queue << ticket
        taken = false
        begin
          until ticket.connection
            return (taken = open_connection) if room?

            remaining = deadline - Timers.now
            raise_pool_timeout if remaining <= 0
            if (orphan = pipeline_to_drain)
              drain(orphan, remaining)
            else
              ticket.condition.wait(@lock, remaining)
            end
          end
          taken = ticket.connection
        ensure
          @pin_queue.delete(ticket)
          release(ticket.connection) if ticket.connection && !taken.equal?(ticket.connection)
        end
      end

      # Marks the least loaded shared connection as draining (unless one is already) and
      # returns a draining one that nobody is reading, if any.
      def pipeline_to_drain
        if @shared.none? { |connection| connection.pipeline.draining? }
          @shared.min_by { |connection| connection.pipeline.depth }&.pipeline&.draining = true
        end
        @shared.map(&:pipeline).find { |pipeline| pipeline.draining? && !pipeline.reading? }
      end

      def drain(pipeline, remaining)
        Timeout.timeout(remaining) { pipeline.await_empty }
      rescue Timeout::Error
        raise_pool_timeout
      end

      def checkin_pinned(connection, clean)
        reusable = clean ? connection.raw.transaction_status == PG::PQTRANS_IDLE : false
        reusable ||= restore(connection.raw)
        synchronize do
          @pinned.delete(connection)
          reusable ? release(connection) : discard(connection)
        end
      rescue PoolClosed
        connection.close
      end

      # Makes a connection given back mid-statement or mid-transaction usable again: cancels
      # the running statement, reads what is left, rolls back. Bounded by RESET_GRACE.
      # @return [Boolean] whether it worked
      def restore(raw)
        return false if raw.finished? || raw.status != PG::CONNECTION_OK
        Timeout.timeout(RESET_GRACE) do
          if raw.transaction_status == PG::PQTRANS_ACTIVE
            raw.cancel
            nil while raw.get_result
          end
          raw.exec("ROLLBACK") unless raw.transaction_status == PG::PQTRANS_IDLE
        end
        raw.transaction_status == PG::PQTRANS_IDLE
      rescue Timeout::Error, PG::Error, IOError, SystemCallError
        false
      end

      # --- Connections --------------------------------------------------------------------------

      def room?
        @connections.size + @connecting < @size
      end

      # Opens a connection with the lock released; counts it toward size meanwhile.
      def open_connection
        @connecting += 1
        connection = nil
        begin
          unlocked do
            connection = Connection.open(@settings)
            @on_connect&.call(connection.raw)
          end
        rescue Exception # rubocop:disable Lint/RescueException
          connection&.close
          @slot_freed.signal
          @pin_queue.first&.condition&.signal
          raise
        ensure
          @connecting -= 1
        end
        @connects += 1
        @connections << connection
        connection
      end

      # The most recently used free connection that is still alive and young enough.
      def take_idle
        reap_idle
        while (connection = @idle.pop)
          return connection if connection.usable? && !expired?(connection)
          discard(connection)
        end
        nil
      end

      def release(connection)
        connection.released_at = Timers.now
        if @closed || expired?(connection)
          discard(connection)
        elsif (ticket = @pin_queue.find { |waiting| waiting.connection.nil? })
          ticket.connection = connection
          ticket.condition.signal
        else
          @idle << connection
          @slot_freed.signal
        end
      end

      def discard(connection)
        @idle.delete(connection)
        @shared.delete(connection)
        return unless @connections.delete(connection)
        @discarded += 1
        connection.close
        @pin_queue.first&.condition&.signal # room for a new connection
        @slot_freed.signal
      end

      def expired?(connection)
        @max_lifetime && connection.age > @max_lifetime
      end

      # Free connections are kept oldest-released first.
      def reap_idle
        while (oldest = @idle.first) &&
              ((@idle_timeout && oldest.idle_time > @idle_timeout) || expired?(oldest))
          discard(oldest)
        end
      end

      def wait_for_slot(condition, deadline)
        remaining = deadline - Timers.now
        raise_pool_timeout if remaining <= 0
        @waiting += 1
        begin
          condition.wait(@lock, remaining)
        ensure
          @waiting -= 1
        end
      end

      def raise_pool_timeout
        raise PoolTimeout, "no PostgreSQL connection free within #{@checkout_timeout}s " \
                           "(pool size #{@size}, #{@pinned.size} pinned, #{@shared.size} shared, " \
                           "#{@waiting} waiting)"
      end
    end
  end
end
