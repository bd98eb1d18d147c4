# frozen_string_literal: true

require "active_record/database_configurations"

module ActiveRecord
  module ConnectionAdapters
    # The parts of the weft_postgresql adapter (WeftPostgreSQLAdapter) that stand on their own.
    module WeftPostgreSQL
      # Sizes ActiveRecord's own connection pool for a weft_postgresql configuration.
      #
      # ActiveRecord's pool holds adapter objects, one per fiber (or thread) that uses the
      # database at the same moment. With weft_postgresql an adapter holds no PostgreSQL
      # connection of its own, so that pool may be large: its size is `lease_limit:`
      # (DEFAULT_LEASE_LIMIT when absent), while `pool:` (`max_connections:` on Rails 8.1) keeps
      # its meaning for the database, the most PostgreSQL connections the process opens
      # (SharedDatabase). Prepended to ActiveRecord's HashConfig (UrlConfig is one too) when the
      # adapter loads; configurations of other adapters are left alone.
      module LeaseLimit
        # Adapter objects at most when the configuration names no `lease_limit:`.
        DEFAULT_LEASE_LIMIT = 1000
        # What ActiveRecord's pool reads its size from: HashConfig#pool on Rails 7.1 and 7.2,
        # #max_connections on 8.1 (where #pool is a deprecated alias of it).
        SIZE_READER = DatabaseConfigurations::HashConfig.method_defined?(:max_connections) ? :max_connections : :pool

        # @return [Integer] the size of ActiveRecord's pool for this configuration
        define_method(SIZE_READER) do
          return super() unless adapter == "weft_postgresql"
          Integer(configuration_hash[:lease_limit] || DEFAULT_LEASE_LIMIT)
        end
      end
    end

    DatabaseConfigurations::HashConfig.prepend(WeftPostgreSQL::LeaseLimit)
  end
end
