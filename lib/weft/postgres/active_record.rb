# frozen_string_literal: true

require "active_support"
require "active_support/isolated_execution_state"
require "active_record"
require "active_record/database_configurations"

module Weft
  module Postgres
    # ActiveRecord on Weft, in one line:
    #
    #   require "weft/postgres/active_record"
    #
    # ActiveRecord leases connections per thread by default, so every request fiber on Weft's
    # one thread would share a single connection and wait its turn. With the isolation level
    # at :fiber each request fiber gets its own connection from ActiveRecord's pool, and since
    # `pg` yields to Weft's scheduler while a statement runs, requests' statements overlap.
    #
    # This file sets that isolation level and, for a database configuration that names no
    # `pool:`, raises ActiveRecord's default pool size of 5 (sized for five threads) to
    # WEFT_DB_POOL or 25, because one process now serves many requests at once. In a Rails app
    # require it from config/application.rb (or set `config.active_support.isolation_level =
    # :fiber` and `pool:` yourself). DATABASE_URL works as it always does in ActiveRecord.
    #
    # Statements still take one round trip each on the request's own connection; they are not
    # pipelined through Weft::Postgres::Pool (docs/postgres.md says why).
    module ActiveRecord
      # The pool size used when the configuration names none.
      def self.default_pool_size
        Integer(ENV.fetch("WEFT_DB_POOL", 25))
      end

      # Prepended to HashConfig: a default pool size for fiber concurrency.
      module DefaultPoolSize
        def pool
          configuration_hash.key?(:pool) ? super : Weft::Postgres::ActiveRecord.default_pool_size
        end
      end
    end
  end
end

ActiveSupport::IsolatedExecutionState.isolation_level = :fiber
ActiveRecord::DatabaseConfigurations::HashConfig.prepend(Weft::Postgres::ActiveRecord::DefaultPoolSize)

if defined?(Rails::Railtie)
  module Weft
    module Postgres
      module ActiveRecord
        # Keeps Rails from setting the isolation level back to :thread at boot.
        class Railtie < ::Rails::Railtie
          config.before_initialize { |app| app.config.active_support.isolation_level = :fiber }
        end
      end
    end
  end
end
