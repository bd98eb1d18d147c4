# frozen_string_literal: true

require "active_record/connection_adapters/abstract/connection_pool"

module ActiveRecord
  module ConnectionAdapters
    module WeftPostgreSQL
      # Closes the shared pool's idle PostgreSQL connections when ActiveRecord disconnects a whole
      # pool of weft_postgresql adapters (ConnectionPool#disconnect!, remove_connection,
      # establish_connection in its place).
      #
      # An adapter holds no PostgreSQL connection of its own, so disconnecting adapters gives
      # back only what they hold, and the shared pool (SharedDatabase) kept its connections open.
      # Rails' database tasks drop a database after using it in the same process (db:drop checks
      # ar_internal_metadata first; db:reset; the purge of db:test:prepare): they disconnect the
      # pool, then send DROP DATABASE, which PostgreSQL refuses while any connection to the
      # database is open. Only idle connections are closed: other ActiveRecord pools on the same
      # shared database (roles, the migrator's lock connection) keep the ones they use, and the
      # shared pool opens new ones as it needs them. Prepended to ActiveRecord's ConnectionPool
      # when the adapter loads; pools of other adapters are left alone.
      module PoolDisconnect
        # @see ActiveRecord::ConnectionAdapters::ConnectionPool#disconnect
        def disconnect(...)
          return super unless db_config.adapter == "weft_postgresql"
          databases = synchronize { @connections.filter_map(&:shared_database).uniq }
          super
        ensure
          databases&.each { |database| database.pool.close_idle }
        end
      end
    end

    ConnectionPool.prepend(WeftPostgreSQL::PoolDisconnect)
  end
end
