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
      # Process-wide and never closed by ActiveRecord (disconnecting an adapter gives back only
      # what that adapter held); across fork the pool drops its parent's connections on first
      # use and opens its own.
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
          # `checkout_timeout:` seconds to wait for one, `pipelining:` and `pipeline_depth:`.
          def pool_options(config)
            options = {
              limit: Integer(config[:max_connections] || config[:pool] || DEFAULT_LIMIT),
              acquire_timeout: Float(config[:checkout_timeout] || DEFAULT_ACQUIRE_TIMEOUT),
              pipelining: ActiveModel::Type::Boolean.new.cast(config.fetch(:pipelining, true)),
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
        end

        # @return [Integer] the server's version as libpq gives it (e.g. 160002), asked once
        def server_version
          @server_version ||= Integer(@pool.query("SHOW server_version_num").getvalue(0, 0))
        end
      end
    end
  end
end
