# frozen_string_literal: true

require "active_support"
require "active_support/isolated_execution_state"
require "active_record"
require "active_record/database_configurations"

# ActiveRecord on Weft, the one-line way (kept for apps that use it; see docs/postgres.md):
#
#   require "weft/postgres/active_record"
#
# Requiring this file opts the whole process in to:
#
# - ActiveSupport's isolation level :fiber (and, in a Rails app, a Railtie that keeps Rails from
#   setting it back), so that each request fiber on Weft's thread gets its own ActiveRecord
#   connection instead of sharing the thread's;
# - for configurations of other adapters that name no `pool:`, an ActiveRecord pool of
#   WEFT_DB_POOL or 25 instead of 5, since one process now serves many requests at once (with
#   `adapter: postgresql` each of those fibers holds a PostgreSQL connection of its own);
# - the `weft_postgresql` adapter (active_record/connection_adapters/weft_postgresql_adapter),
#   which shares a few pipelined connections among all fibers instead. That adapter needs only
#   the isolation level from here: an app may require the adapter and set
#   `config.active_support.isolation_level = :fiber` itself instead of this file;
# - connections given back to ActiveRecord's pools as each Weft task ends, whatever the adapter
#   (Weft::Postgres::ActiveRecordTaskEnd): Weft reuses a task's fiber for the next task, and
#   ActiveRecord would keep a connection the task left leased with the fiber.
module Weft
  module Postgres
    # What `require "weft/postgres/active_record"` sets up. Named so as not to shadow
    # ::ActiveRecord inside Weft::Postgres.
    module FiberActiveRecord
      # The ActiveRecord pool size for configurations that name none.
      def self.default_pool_size
        Integer(ENV.fetch("WEFT_DB_POOL", 25))
      end

      # Prepended to HashConfig: a default pool size for fiber concurrency. weft_postgresql
      # configurations size ActiveRecord's pool themselves (`lease_limit:`).
      module DefaultPoolSize
        # The configuration keys that set the pool's size, and the HashConfig method ActiveRecord
        # reads it from: `pool:` (#pool) up to Rails 7.2; Rails 8.1 reads #max_connections, from
        # `max_connections:` or the older `pool:`.
        SIZE_KEYS, SIZE_READER =
          if ActiveRecord::DatabaseConfigurations::HashConfig.method_defined?(:max_connections)
            [%i[max_connections pool], :max_connections]
          else
            [%i[pool], :pool]
          end

        # @return [Integer]
        define_method(SIZE_READER) do
          return super() if SIZE_KEYS.any? { |key| configuration_hash.key?(key) } || adapter == "weft_postgresql"
          FiberActiveRecord.default_pool_size
        end
      end
    end
  end
end

ActiveSupport::IsolatedExecutionState.isolation_level = :fiber
ActiveRecord::DatabaseConfigurations::HashConfig.prepend(Weft::Postgres::FiberActiveRecord::DefaultPoolSize)
require "active_record/connection_adapters/weft_postgresql_adapter"
require_relative "active_record_task_end"
Weft::Postgres::ActiveRecordTaskEnd.install # done by the adapter already; said here too, as this file promises it

if defined?(Rails::Railtie)
  module Weft
    module Postgres
      module FiberActiveRecord
        # Keeps Rails from setting the isolation level back to :thread at boot.
        class Railtie < ::Rails::Railtie
          config.before_initialize { |app| app.config.active_support.isolation_level = :fiber }
        end
      end
    end
  end
end
