# frozen_string_literal: true

# A small Rack app on ActiveRecord's weft_postgresql adapter for
# test/postgres/frameworks_test.rb: DATABASE_URL is weft-postgresql://...?pool=N, so every
# request fiber gets an ActiveRecord connection while PostgreSQL sees at most N.
require "active_record/connection_adapters/weft_postgresql_adapter"

ActiveSupport::IsolatedExecutionState.isolation_level = :fiber # a Rails app: config.active_support.isolation_level
ActiveRecord::Base.establish_connection

# A model, to show ordinary ActiveRecord use alongside raw SQL.
class WeftProbe < ActiveRecord::Base
  self.table_name = "weft_probes"
end

ActiveRecord::Base.connection_pool.with_connection do |conn|
  conn.create_table(:weft_probes, if_not_exists: true) { |t| t.string :name }
end

# MIGRATE=folder: its migrations run at boot, as an app may run them before it serves, on the
# adapter ActiveRecord leases to the booting thread and keeps there (not in with_connection).
ActiveRecord::MigrationContext.new(ENV["MIGRATE"]).migrate if ENV["MIGRATE"]

run lambda { |env|
  body = ActiveRecord::Base.connection_pool.with_connection do |conn|
    case env["PATH_INFO"]
    when "/sleep" then "slept #{conn.select_value('select pg_sleep(0.5)::text')}"
    when "/probe"
      probe = WeftProbe.transaction { WeftProbe.create!(name: "w") }
      "probe #{WeftProbe.find(probe.id).name} #{WeftProbe.where(id: probe.id).count}"
    when "/widgets" then "widgets #{conn.select_value('select count(*) from weft_boot_widgets')}"
    when "/backends"
      conn.select_value("select count(*) from pg_stat_activity where application_name = 'weft' " \
                        "and datname = current_database()").to_s
    else "adapter #{conn.adapter_name} #{ActiveRecord::Base.connection_db_config.adapter} #{ActiveRecord.version}"
    end
  end
  [200, { "content-type" => "text/plain" }, [body]]
}
