# frozen_string_literal: true

require "active_record"
require "active_record/connection_adapters/postgresql_adapter"
require "active_support/isolated_execution_state"
require "weft/postgres"
require_relative "weft_postgresql/session_setup"
require_relative "weft_postgresql/shared_database"
require_relative "weft_postgresql/routed_connection"
require_relative "weft_postgresql/lease_limit"
require_relative "weft_postgresql/type_lookup"
require_relative "weft_postgresql/pool_disconnect"
require_relative "../../weft/postgres/active_record_task_end"

module ActiveRecord
  module ConnectionAdapters
    # ActiveRecord's PostgreSQL adapter with its statements sent through a Weft::Postgres::Pool
    # shared by the whole process: `adapter: weft_postgresql` (database.yml, establish_connection,
    # or DATABASE_URL=weft-postgresql://...). Rails 7.1, 7.2 and 8.1.
    #
    # An adapter object holds no PostgreSQL connection. Its statements share the pool's
    # connections, pipelined, with every other adapter's; a transaction (or anything that
    # changes the session) takes one of the pool's connections for the adapter alone until it
    # ends (see WeftPostgreSQL::RoutedConnection). So ActiveRecord's pool can hand out an adapter
    # to every request fiber at once (`lease_limit:`, default 1000) while PostgreSQL sees at most
    # `pool:` connections per process.
    #
    # Differences from `adapter: postgresql`:
    # - Prepared statements (`prepared_statements:`, on by default as with `postgresql`) are the
    #   shared pool's, not ActiveRecord's: a prepared statement lives in one session, and
    #   statements here go to whichever connection is free. ActiveRecord sends a statement with
    #   its binds as parameters (`$1`...), unnamed, and the pool prepares each text it sees
    #   again on each of its connections (Weft::Postgres::PreparedStatements; `statement_limit:`
    #   bounds them per connection), inside transactions too, on the connection the transaction
    #   holds (but a whole-row SELECT, `"posts".*`, whose named statement a schema change would
    #   fail there). Off, values are written into the SQL, as with `postgresql`, and the pool
    #   prepares nothing.
    # - Session settings (encoding, min_messages, schema_search_path, variables, standard
    #   strings, intervalstyle, time zone) are applied to every pool connection as it opens
    #   (WeftPostgreSQL::SessionSetup), not per adapter.
    # - SQL sent in the simple protocol (`execute`; on Rails 8.1 every query without binds)
    #   is pipelined when it is one statement that reads or writes rows; several statements in
    #   one string, DDL and utility commands take a connection alone for their round trip.
    # - PostgreSQL notices do not reach ActiveRecord.db_warnings_action.
    # - ActiveSupport's isolation level must be :fiber under a fiber scheduler (each request
    #   fiber its own adapter); a transaction begun otherwise raises.
    # - On Rails 7.1 a fiber keeps the adapter it first queried with until it gives it back
    #   (Rails' executor does at the end of each request; elsewhere `connection_pool.
    #   with_connection` or `release_connection`), and with it any connection it holds; 7.2
    #   leases one per query.
    #
    # See docs/postgres.md, "ActiveRecord".
    class WeftPostgreSQLAdapter < PostgreSQLAdapter
      # Raised when a transaction begins under a fiber scheduler while ActiveRecord gives all
      # fibers of a thread the same adapter: their statements would join each other's
      # transactions.
      class IsolationLevelError < ActiveRecordError
        include Weft::Error
      end

      # @api private
      # @return [WeftPostgreSQL::SharedDatabase, nil] the shared database this adapter's
      #   statements go to, once it has connected
      attr_reader :shared_database

      # No round trip: the shared pool checks its connections before each use and replaces
      # broken ones, so an adapter is alive while its routed connection is open and the
      # connection it holds, if any, is good.
      # @return [Boolean]
      def active?
        @lock.synchronize do
          return false unless @raw_connection&.status == PG::CONNECTION_OK
          verified!
        end
        true
      end

      # Rolls back and gives back whatever this adapter holds (clearing its session if it
      # changed it), then resets ActiveRecord's state as the PostgreSQL adapter does. Other
      # adapters' connections are untouched.
      def reset!
        @lock.synchronize do
          return connect! unless @raw_connection
          @raw_connection.release
          AbstractAdapter.instance_method(:reset!).bind_call(self)
        end
      end

      # Clears what a Weft task that ended with this adapter leased left in it, before the
      # adapter goes back to ActiveRecord's pool (Weft::Postgres::ActiveRecordTaskEnd): the
      # PostgreSQL connection it held goes back to the shared pool (rolled back, its session
      # cleared) and ActiveRecord's transaction state is dropped. Unlike #reset!, which also
      # configures the adapter again (a pg_type query), no round trip when nothing is held.
      # @return [void]
      def reset_for_next_task!
        @lock.synchronize do
          @raw_connection&.release
          reset_transaction
        end
      end

      # The PG::Connection itself, for what ActiveRecord does not offer (COPY, large objects):
      # the adapter takes one of the pool's connections and keeps it until it goes back to
      # ActiveRecord's pool, when its session is cleared for the next user.
      # @return [PG::Connection]
      def raw_connection
        with_raw_connection do |routed|
          disable_lazy_transactions!
          @raw_connection_dirty = true
          routed.pin_session
        end
      end

      # Takes a session advisory lock (`pg_try_advisory_lock`), as ActiveRecord's migrator does
      # around each run. The lock lives in a session, so the adapter holds the connection it was
      # taken on (as for any session change) until #release_advisory_lock unlocks it; a try that
      # failed holds nothing, and the connection goes back at once if nothing else held it.
      # @param lock_id [Integer]
      # @return [Boolean] whether the lock was taken
      def get_advisory_lock(lock_id)
        routed = @raw_connection # nil until the adapter connects (in super, then)
        session_was_shared = !routed&.session_changed?
        changes_before = routed ? routed.session_changes : 0
        locked = super
        # Only the lock's own statement changed the session (not, say, a reconnect's SET).
        lock_alone = session_was_shared && (routed.nil? || @raw_connection.equal?(routed)) &&
                     @raw_connection.session_changes == changes_before + 1
        if lock_alone && locked
          @lone_advisory_lock = [lock_id, @raw_connection, @raw_connection.session_changes]
        elsif lock_alone
          give_back_restored_session # a failed try holds nothing
        end
        locked
      end

      # Unlocks a lock of #get_advisory_lock. When that lock was all that held the adapter's
      # connection (nothing else changed the session since), the connection goes back to the
      # shared pool, its session as the pool gave it: ActiveRecord keeps the adapter that
      # migrated leased (DatabaseTasks' lease_connection, Rails 7.1's Base.connection), and
      # holding the connection on until the adapter went back took one of the pool's
      # connections from every other fiber (with `pool: 1`, all of them waited
      # checkout_timeout and failed).
      # @param lock_id [Integer]
      # @return [Boolean] whether the lock was held and is now released
      def release_advisory_lock(lock_id)
        unlocked = super
        lone_lock_id, routed, changes = @lone_advisory_lock
        if lone_lock_id == lock_id
          @lone_advisory_lock = nil
          give_back_restored_session if unlocked && @raw_connection.equal?(routed) && routed.session_changes == changes
        end
        unlocked
      end

      # @see PostgreSQL::DatabaseStatements#begin_db_transaction
      def begin_db_transaction
        require_fiber_isolation
        super
      end

      # @see PostgreSQL::DatabaseStatements#begin_isolated_db_transaction
      def begin_isolated_db_transaction(isolation)
        require_fiber_isolation
        super
      end

      private

      # ActiveRecord's own prepared statements (a name per statement on the adapter's one
      # connection) become plain statements with parameters: the shared pool names them per
      # connection (see the class comment). Rails 7.1 and 7.2 prepare in #exec_cache, 8.x in
      # #perform_query.
      if private_method_defined?(:perform_query)
        def perform_query(raw_connection, sql, binds, type_casted_binds, prepare:, notification_payload:, batch: false)
          super(raw_connection, sql, binds, type_casted_binds, prepare: false, notification_payload: notification_payload,
                                                                batch: batch)
        end
      else
        def exec_cache(sql, name, binds, async:, allow_retry:, materialize_transactions:)
          exec_no_cache(sql, name, binds, async: async, allow_retry: allow_retry,
                                          materialize_transactions: materialize_transactions)
        end
      end

      def connect
        @shared_database = WeftPostgreSQL::SharedDatabase.for(@connection_parameters, @config, default_timezone)
        @raw_connection = WeftPostgreSQL::RoutedConnection.new(@shared_database)
      end

      # Only what lives in this process: encoders, decoders and the type map. The session
      # settings are the shared pool's (WeftPostgreSQL::SessionSetup); the type map is the
      # shared database's, built by the first adapter that connects (SharedDatabase#type_map).
      def configure_connection
        check_version
        add_pg_encoders
        add_pg_decoders
        @shared_database.type_map(@default_timezone) { build_type_map }
      end

      # ActiveRecord calls this after a schema change that adds or alters types (extensions,
      # enums): the shared type map is built anew, for every adapter of the database with this
      # adapter's time zone setting.
      def reload_type_map
        @lock.synchronize do
          @shared_database.rebuild_type_map(@default_timezone) { build_type_map }
        end
        nil
      end

      # The shared type map, or the one being built by this adapter: ActiveRecord's
      # PostgreSQL adapter reads its type map here, the code that fills a new map included.
      def type_map
        @building_type_map || @shared_database&.built_type_map(@default_timezone)
      end

      # A type map built from the server's catalog, as ActiveRecord builds an adapter's own
      # (#initialize_type_map adds the types it loads to #type_map: this one, meanwhile).
      # @return [Type::HashLookupTypeMap]
      def build_type_map
        @building_type_map = Type::HashLookupTypeMap.new
        initialize_type_map(@building_type_map)
        @building_type_map
      ensure
        @building_type_map = nil
      end

      # The pool's connections got the session time zone for ActiveRecord.default_timezone as
      # it was when the pool was made; only if it changed since does this adapter set its own
      # (which holds a connection for it, as any session change does).
      def reconfigure_connection_timezone
        super unless @raw_connection.session_setup.timezone_for?(default_timezone)
      end

      # The session of the held connection is as the pool gave it again (see
      # #release_advisory_lock): it goes back unless a transaction still needs it.
      def give_back_restored_session
        @lock.synchronize { @raw_connection.session_restored }
      end

      # Called as ActiveRecord's pool takes the adapter back: what it held goes back too.
      def release_held_connection
        @raw_connection&.release
      end
      set_callback :checkin, :after, :release_held_connection

      def require_fiber_isolation
        return unless Fiber.scheduler && ActiveSupport::IsolatedExecutionState.isolation_level != :fiber
        raise IsolationLevelError, "weft_postgresql under a fiber scheduler needs " \
                                   "ActiveSupport::IsolatedExecutionState.isolation_level = :fiber " \
                                   "(Rails: config.active_support.isolation_level = :fiber)"
      end

      # ActiveRecord reconnects and runs a statement again after a ConnectionNotEstablished,
      # which ConnectionTimeoutError is; here that error means no PostgreSQL connection of the
      # shared pool was free within checkout_timeout, not that this adapter's connection
      # dropped. Reconnecting would wait for one again (the adapter's set-up queries), and so
      # would the statement run again: the caller waited three to four times checkout_timeout,
      # adding work to a pool already short of connections. ActiveRecord's own pool raises it
      # once, after checkout_timeout.
      def retryable_connection_error?(exception)
        !exception.is_a?(ConnectionTimeoutError) && super
      end

      # Weft's own failures, as ActiveRecord's: no connection in time, the server unreachable
      # (a database that does not exist, as NoDatabaseError, which db:create relies on). A
      # passed Weft.deadline goes on as it is.
      def translate_exception(exception, message:, sql:, binds:)
        case exception
        when Weft::Postgres::PoolTimeout
          ConnectionTimeoutError.new(message, connection_pool: @pool)
        when Weft::Postgres::ConnectionError
          database = @connection_parameters[:dbname]
          if database && exception.message.include?(%(database "#{database}" does not exist))
            NoDatabaseError.db_error(database)
          else
            ConnectionNotEstablished.new(exception, connection_pool: @pool)
          end
        when Weft::DeadlineExceeded then exception
        else super
        end
      end
    end

    if respond_to?(:register) # Rails 7.2 and later: an adapter registry
      register "weft_postgresql", "ActiveRecord::ConnectionAdapters::WeftPostgreSQLAdapter",
               "active_record/connection_adapters/weft_postgresql_adapter"
    end
  end

  unless ConnectionAdapters.respond_to?(:register)
    # Rails 7.1 has no adapter registry: it requires active_record/connection_adapters/
    # <adapter>_adapter and calls the ActiveRecord::Base method named after the adapter.
    module ConnectionHandling
      # @param config [Hash] the database configuration
      # @return [ConnectionAdapters::WeftPostgreSQLAdapter]
      def weft_postgresql_connection(config)
        ConnectionAdapters::WeftPostgreSQLAdapter.new(config)
      end
    end
  end
end

# A task's adapter goes back to ActiveRecord's pool as the task ends, not to the next task in its
# fiber (see Weft::Postgres::ActiveRecordTaskEnd).
Weft::Postgres::ActiveRecordTaskEnd.install

ActiveSupport.run_load_hooks(:active_record_weft_postgresqladapter, ActiveRecord::ConnectionAdapters::WeftPostgreSQLAdapter)
