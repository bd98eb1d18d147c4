# frozen_string_literal: true

require "pg"
require_relative "../../../weft/postgres/statement_scope"

module ActiveRecord
  module ConnectionAdapters
    module WeftPostgreSQL
      # What WeftPostgreSQLAdapter has in place of a PG::Connection: the part of PG::Connection's
      # interface ActiveRecord's PostgreSQL adapter uses, with each statement sent where it may
      # run.
      #
      # - A statement that needs no session of its own goes through the shared pool's
      #   Weft::Postgres::Pool#query: it shares a connection, pipelined, with other adapters'
      #   statements.
      # - A statement that opens a transaction (BEGIN) takes a connection for this adapter alone
      #   (Weft::Postgres::Pool#lease); everything after it runs there until the transaction has
      #   ended (COMMIT, ROLLBACK), then the connection goes back. So does, for its round trip, a
      #   SET LOCAL outside a transaction: on a shared connection it would hold for the other
      #   statements of its pipeline segment (their implicit transaction).
      # - A statement that leaves state in the session (see Weft::Postgres::StatementScope) takes
      #   a connection the same way and keeps it until #release, which ActiveRecord calls as the
      #   adapter goes back to its pool; the session is then cleared (DISCARD ALL) and set up
      #   anew.
      # - Simple-protocol statements (#async_exec: `execute`, DDL, fixtures; possibly several
      #   statements in one string, which a pipeline cannot carry) run on a leased connection too,
      #   unless they are a single statement that reads or writes rows (Rails 8.1's queries).
      #
      # Results get the adapter's result type map, and parameters are encoded with its query
      # type map, as PG::Connection would do with its own.
      class RoutedConnection
        # Tells from a statement's text where it may run (Weft's PostgreSQL component's own).
        StatementScope = Weft::Postgres::StatementScope
        private_constant :StatementScope

        # @return [PG::TypeMapByClass, nil] how parameters are encoded (set by the adapter)
        attr_accessor :type_map_for_queries
        # @return [PG::TypeMap, nil] how result values are decoded (set by the adapter)
        attr_accessor :type_map_for_results
        # @return [Integer] how many statements (and #pin_session calls) have changed the session
        #   of a held connection so far, counted over this object's life: a caller that notes it
        #   can tell later whether anything changed the session since
        attr_reader :session_changes

        # @param database [SharedDatabase]
        def initialize(database)
          @database = database
          @lease = nil
          @session_state = false
          @session_changes = 0
          @running = nil # the fiber (or thread) whose statement runs on the lease, while one does
          @abandoned = nil # the lease #release left to that fiber to give back
          @lease_fiber = nil # the fiber and Weft task that took the lease
          @lease_task = nil
          @closed = false
          @type_map_for_queries = nil
          @type_map_for_results = nil
        end

        # Runs one statement with parameters (extended protocol), on the shared pool unless it
        # needs a connection of its own.
        # @return [PG::Result]
        def exec_params(sql, params = [])
          params = encode(params)
          drop_earlier_tasks_lease if @lease
          if @lease || StatementScope.transaction_statement?(sql) || StatementScope.session_state?(sql)
            typed(on_lease(sql) { |lease| lease.exec_params(sql, params) })
          else
            typed(@database.pool.query_stateless(sql, params))
          end
        end

        # Runs SQL sent for the simple protocol: one statement that reads or writes rows and
        # needs no session of its own goes through the shared pool as #exec_params would send it
        # (Rails 8.1 sends every query without binds this way, and with prepared statements off
        # none has binds); anything else (several statements, DDL, utility commands) runs in the
        # simple protocol on a leased connection.
        # @return [PG::Result] the last statement's result
        def async_exec(sql)
          drop_earlier_tasks_lease if @lease
          if @lease || !StatementScope.single_data_statement?(sql) || StatementScope.session_state?(sql)
            typed(on_lease(sql) { |lease| lease.async_exec(sql) })
          else
            typed(@database.pool.query_stateless(sql))
          end
        end
        alias exec async_exec
        alias query async_exec

        # Holds a connection for this adapter, as if it had changed the session, and returns it:
        # for callers that want the PG::Connection itself (the adapter's #raw_connection).
        # @return [PG::Connection]
        def pin_session
          raise PG::ConnectionBad, "connection is closed" if @closed
          drop_earlier_tasks_lease if @lease
          take_lease unless @lease
          if @closed # by another fiber while this one waited for the connection (see #on_lease)
            release
            raise PG::ConnectionBad, "connection is closed"
          end
          @session_state = true
          @session_changes += 1
          @lease.raw
        end

        # Gives back the connection held, if any: rolled back if a transaction is open, and its
        # session cleared and set up again if this adapter changed it.
        #
        # Called from another fiber while a statement runs on the held connection (ActiveRecord's
        # ConnectionPool#disconnect! takes back adapters still checked out after
        # checkout_timeout), the statement is cancelled and the connection left to the fiber
        # waiting for its answer, which gives it back and fails (see #on_lease): giving it back
        # here, the pool would read the cancelled statement's answer while that fiber waits on
        # the same socket, so that the fiber read nothing (its statement answered nil, and its
        # transaction went on as if it had run) or, once the connection served someone else,
        # their result.
        # @return [void]
        def release
          return unless (lease = @lease)
          @lease = nil
          if @running && !@running.equal?(Fiber.current) && @running.alive? # a dead fiber reads nothing
            @abandoned = lease
            cancel_running(lease)
            return
          end
          reset_session = @session_state
          @session_state = false
          lease.release(reset_session: reset_session)
        end

        # @return [Boolean] whether a connection is held for a changed session (cleared as it
        #   goes back)
        def session_changed?
          @session_state
        end

        # For a caller that undid its own change of the session (an advisory lock it unlocked)
        # and knows no other was made (#session_changes): the connection is no longer held for
        # its session, and goes back to the pool as it is (no DISCARD ALL) unless an open
        # transaction still needs it.
        # @return [void]
        def session_restored
          return unless @lease && @session_state
          @session_state = false
          release_unless_needed(true)
        end

        # @return [Integer] PG::PQTRANS_* of the held connection; idle when none is held
        def transaction_status
          @lease ? @lease.raw.transaction_status : PG::PQTRANS_IDLE
        end

        # @return [Integer] PG::CONNECTION_OK while usable, PG::CONNECTION_BAD once closed or when
        #   the held connection broke (the shared pool replaces broken connections by itself)
        def status
          return PG::CONNECTION_BAD if @closed
          @lease ? @lease.raw.status : PG::CONNECTION_OK
        end

        # Releases what is held and refuses further use.
        def close
          release
          @closed = true
        end
        alias finish close

        # @return [Boolean]
        def finished?
          @closed
        end

        # PG::Connection#reset reconnects; here that means giving back what is held (a broken
        # connection is closed by the pool) and going on with fresh ones.
        def reset
          raise PG::ConnectionBad, "connection is closed" if @closed
          release
        end

        # Asks the server to cancel the statement running on the held connection, if any.
        def cancel
          @lease&.raw&.cancel
        end

        # Waits for the held connection's statement to end.
        def block(*args)
          @lease&.raw&.block(*args)
        end

        # There is no socket of this adapter's own (ActiveRecord reopens it on /dev/null after
        # fork; the shared pool already never touches its parent's connections).
        # @return [nil]
        def socket_io
          nil
        end

        # @return [SessionSetup] the settings every connection this routes to has
        def session_setup
          @database.session_setup
        end

        # @return [Integer] the server's version (e.g. 160002)
        def server_version
          @database.server_version
        end

        # Escapes a string for a literal, as PG::Connection#escape_string does with
        # standard_conforming_strings on (set on every connection by SessionSetup).
        # @return [String]
        def escape_string(string)
          raise ArgumentError, "invalid byte sequence in #{string.encoding}" unless string.valid_encoding?
          string.gsub("'", "''")
        end
        alias escape escape_string

        # @return [String] bytes in PostgreSQL's hex format (what PG::Connection#escape_bytea
        #   gives against any supported server)
        def escape_bytea(bytes)
          "\\x#{bytes.unpack1('H*')}"
        end

        # @return [String] bytes from bytea text output
        def unescape_bytea(text)
          PG::Connection.unescape_bytea(text)
        end

        private

        # Runs the block with the lease of a held connection (leasing one if none is held) and
        # afterwards gives it back unless it is still needed: a transaction is open, the session
        # was changed, or a statement of an open transaction was interrupted (ActiveRecord
        # cancels it as it rolls back). A statement interrupted outside a transaction lets the
        # connection go; the pool cancels it in the background. The lease's statements answer
        # without a reactor turn while connections are short (Weft::Postgres::Lease#exec_params).
        #
        # Should the adapter be taken back by another fiber meanwhile (#release), the statement
        # fails with PG::ConnectionBad (unless its cancellation failed it already), as on a
        # PG::Connection closed under it, and the connection goes back with its session cleared.
        def on_lease(sql)
          raise PG::ConnectionBad, "connection is closed" if @closed
          held_before = !@lease.nil?
          lease = @lease || take_lease
          # Closed by another fiber while this one waited for the connection (ActiveRecord's
          # disconnect! takes adapters still in use): nobody would give the connection back.
          raise PG::ConnectionBad, "connection is closed" if @closed
          if StatementScope.session_state?(sql)
            @session_state = true
            @session_changes += 1
          end
          @running = Fiber.current
          result = traced(sql) { yield lease }
          raise PG::ConnectionBad, "the connection was taken back while the statement ran" if @abandoned.equal?(lease)
          result
        ensure
          @running = nil
          if lease && @abandoned.equal?(lease)
            @abandoned = nil
            @session_state = false
            lease.release(reset_session: true)
          elsif @lease
            release_unless_needed(held_before)
          end
        end

        # Leases a connection for this adapter, noting the fiber and Weft task it is taken in.
        # @return [Weft::Postgres::Lease]
        def take_lease
          lease = @database.pool.lease
          @lease_fiber = Fiber.current
          @lease_task = Weft::Task.current
          @lease = lease
        end

        # Weft runs task after task in one fiber, and ActiveRecord keeps an adapter with the
        # fiber that checked it out until it is given back (Rails 7.1 for any query through a
        # model; 7.2 and 8.1 for lease_connection and the deprecated connection): a task that
        # ends without giving it back leaves it to the next task in its fiber. What the adapter
        # holds is the earlier task's, though: a session it changed (SET, raw_connection), a
        # transaction it began with execute("BEGIN"). That connection is rolled back, its session
        # cleared, and given back before the next task's first statement, as a fiber's own
        # state is (Weft's scheduler clears fiber-locals between tasks). A lease used from
        # another fiber (an adapter shared on purpose, such as the one transactional tests pin)
        # is left alone. Weft::Postgres::ActiveRecordTaskEnd gives the adapter itself back to
        # ActiveRecord's pool as the task ends; this is the second line, for an adapter that
        # stayed with the fiber all the same (one it did not own, or a hook that failed).
        def drop_earlier_tasks_lease
          return unless Fiber.current.equal?(@lease_fiber) && !Weft::Task.current.equal?(@lease_task)
          lease = @lease
          @lease = nil
          @session_state = false
          lease.release(reset_session: true)
        end

        # Asks the server to cancel what runs on a lease another fiber waits on.
        def cancel_running(lease)
          lease.raw.cancel
        rescue PG::Error, IOError, SystemCallError
          nil # the waiting fiber's statement then ends by itself
        end

        # Marks a statement on the held connection on Weft::Postgres::Trace's timeline.
        def traced(sql)
          return yield unless Weft::Postgres::Trace::ON
          Weft::Postgres::Trace.event(:lease_exec, nil, Weft::Postgres::Trace.tag(sql))
          begin
            yield
          ensure
            Weft::Postgres::Trace.event(:lease_exec_done)
          end
        end

        def release_unless_needed(held_before)
          return if @session_state
          case @lease.raw.transaction_status
          when PG::PQTRANS_INTRANS, PG::PQTRANS_INERROR then return
          when PG::PQTRANS_ACTIVE then return if held_before
          end
          release
        end

        def encode(params)
          map = @type_map_for_queries
          return params unless map && !params.empty?
          params.map { |value| (coder = map[value.class]) ? coder.encode(value) : value }
        end

        def typed(result)
          result.type_map = @type_map_for_results if @type_map_for_results
          result
        end
      end
    end
  end
end
