# frozen_string_literal: true

require "weft/postgres"
require_relative "session_setup"

module ActiveRecord
  module ConnectionAdapters
    module WeftPostgreSQL
      # One database's share of PostgreSQL in this process: the Weft::Postgres::Pool that every
      # adapter of a database configuration sends its statements to (across all of
      # ActiveRecord's connection pools and roles that name the same server, database, session
      # settings and pool options), with the session setup each of its connections gets.
      #
      # It also holds the type map (PostgreSQL types by OID to ActiveRecord types), which
      # ActiveRecord's PostgreSQL adapter would otherwise ask the server for (three catalog
      # queries) and build for each adapter object; WeftPostgreSQLAdapter makes one per fiber
      # that queries, not one per PostgreSQL connection. See #type_map.
      #
      # Process-wide and never closed by ActiveRecord: disconnecting an adapter gives back only
      # what that adapter held, and disconnecting an ActiveRecord pool closes the idle
      # connections too (PoolDisconnect), the pool opening new ones as it needs them. Across
      # fork the pool drops its parent's connections on first use and opens its own.
      class SharedDatabase
        # The real connections when the configuration names no `pool:`, as ActiveRecord's own
        # default.
        DEFAULT_LIMIT = 5
        # Seconds to wait for a connection when the configuration names no `checkout_timeout:`.
        DEFAULT_ACQUIRE_TIMEOUT = 5.0

        @registry = {}
        @lock = Thread::Mutex.new

        class << self
          # The shared database for a configuration, made on first use.
          # @param connection_parameters [Hash{Symbol=>String}] libpq parameters (host, dbname...)
          # @param config [Hash{Symbol=>Object}] the whole database configuration
          # @param default_timezone [Symbol] the adapter's (:utc or :local), for the session's
          # @return [SharedDatabase]
          def for(connection_parameters, config, default_timezone)
            setup = SessionSetup.new(config, default_timezone: default_timezone)
            options = pool_options(config)
            key = [connection_parameters, setup, options]
            @lock.synchronize { @registry[key] ||= new(connection_parameters, setup, options) }
          end

          # Closes every shared pool and forgets it (tests; a process about to exit). Adapters
          # that still refer to one get Weft::Postgres::PoolClosed.
          # @return [void]
          def close_all
            databases = @lock.synchronize { @registry.values.tap { @registry.clear } }
            databases.each { |database| database.pool.close }
            nil
          end

          private

          # Weft::Postgres::Pool options from the configuration: `pool:` real connections (or
          # `max_connections:`, Rails 8.1's name for it, which refuses the two set apart),
          # `checkout_timeout:` seconds to wait for one, `pipelining:` and `pipeline_depth:`,
          # and named statements per connection: none with `prepared_statements: false` (values
          # are then written into the SQL, whose texts seldom repeat), else `statement_limit:`
          # (ActiveRecord's bound for its own) or the pool's default.
          def pool_options(config)
            boolean = ActiveModel::Type::Boolean.new
            prepared = boolean.cast(config.fetch(:prepared_statements, true))
            options = {
              limit: Integer(config[:max_connections] || config[:pool] || DEFAULT_LIMIT),
              acquire_timeout: Float(config[:checkout_timeout] || DEFAULT_ACQUIRE_TIMEOUT),
              pipelining: boolean.cast(config.fetch(:pipelining, true)),
              prepared_statements: prepared && (config[:statement_limit] ? Integer(config[:statement_limit]) : true),
            }
            options[:pipeline_depth] = Integer(config[:pipeline_depth]) if config[:pipeline_depth]
            options
          end
        end

        # @return [Weft::Postgres::Pool]
        attr_reader :pool
        # @return [SessionSetup]
        attr_reader :session_setup

        # @param connection_parameters [Hash{Symbol=>String}] libpq parameters
        # @param session_setup [SessionSetup] applied to each connection as it opens
        # @param pool_options [Hash] for Weft::Postgres::Pool.new
        def initialize(connection_parameters, session_setup, pool_options)
          @session_setup = session_setup
          @pool = Weft::Postgres::Pool.new(connection_parameters, on_connect: session_setup, **pool_options)
          @server_version = nil
          @type_maps = {} # the adapters' time zone setting => their ActiveRecord type map
          @lock = Thread::Mutex.new # one build at a time (fibers and threads alike)
        end

        # The ActiveRecord type map the adapters with a given time zone setting share (the map
        # registers time and timestamp types with it, so each setting has its own). Built with
        # the block the first time, by the first adapter that asks; callers that ask meanwhile
        # wait for it rather than build their own.
        #
        # The map is built once and then only grows: an adapter that meets a type OID the map
        # lacks (a type created since, by SQL) loads it into the shared map, for every adapter.
        # It is rebuilt (#rebuild_type_map) where ActiveRecord rebuilds an adapter's own, after a
        # schema change that adds or alters types through the adapter (extensions, enums).
        # Readers never see a map half built: a rebuild makes a new map and puts it in place of
        # the old one when it is complete.
        # @param key [Symbol, nil] the adapters' default_timezone setting (nil: follow ActiveRecord's)
        # @yieldreturn [ActiveRecord::Type::HashLookupTypeMap] a map built from the server's catalog
        # @return [ActiveRecord::Type::HashLookupTypeMap]
        def type_map(key)
          @type_maps[key] || @lock.synchronize { @type_maps[key] ||= yield }
        end

        # Builds the type map for `key` anew with the block and puts it in place: the adapters
        # with that setting use the new one from their next lookup on.
        # @yieldreturn [ActiveRecord::Type::HashLookupTypeMap]
        # @return [ActiveRecord::Type::HashLookupTypeMap]
        def rebuild_type_map(key)
          @lock.synchronize { @type_maps[key] = yield }
        end

        # @param key [Symbol, nil]
        # @return [ActiveRecord::Type::HashLookupTypeMap, nil] the map for `key`, if built
        def built_type_map(key)
          @type_maps[key]
        end

        # @return [Integer] the server's version as libpq gives it (e.g. 160002), asked once
        def server_version
          @server_version ||= Integer(@pool.query("SHOW server_version_num").getvalue(0, 0))
        end
      end
    end
  end
end
