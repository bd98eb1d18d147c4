# frozen_string_literal: true

# A small Rack app on ActiveRecord for test/postgres/frameworks_test.rb. Connects through
# DATABASE_URL.
require "weft/postgres/active_record"

ActiveRecord::Base.establish_connection

# A model, to show ordinary ActiveRecord use alongside raw SQL.
class WeftProbe < ActiveRecord::Base
  self.table_name = "weft_probes"
end

ActiveRecord::Base.connection_pool.with_connection do |conn|
  conn.create_table(:weft_probes, if_not_exists: true) { |t| t.string :name }
end

run lambda { |env|
  body = ActiveRecord::Base.connection_pool.with_connection do |conn|
    case env["PATH_INFO"]
    when "/sleep" then "slept #{conn.select_value('select pg_sleep(0.5), pg_backend_pid()')}"
    when "/probe"
      probe = WeftProbe.create!(name: "p")
      "probe #{WeftProbe.find(probe.id).name} #{WeftProbe.where(id: probe.id).count}"
    when "/version" then ActiveRecord.version.to_s
    else "pid #{conn.select_value('select pg_backend_pid()')}"
    end
  end
  [200, { "content-type" => "text/plain" }, [body]]
}
