# frozen_string_literal: true

# A small Rack app on Sequel's weft_postgres adapter for test/postgres/frameworks_test.rb.
# Connects through DATABASE_URL.
require "sequel"

DB = Sequel.connect(adapter: :weft_postgres) # DATABASE_URL when no connection options are given
DB.create_table?(:weft_sequel_probes) do
  primary_key :id
  String :name
end

run lambda { |env|
  body = case env["PATH_INFO"]
         when "/sleep" then "slept #{DB.get(Sequel.lit('pg_sleep(0.5)'))}"
         when "/probe"
           id = DB[:weft_sequel_probes].insert(name: "s")
           "probe #{DB[:weft_sequel_probes].where(id: id).get(:name)}"
         else "pid #{DB.get(Sequel.function(:pg_backend_pid))}"
         end
  [200, { "content-type" => "text/plain" }, [body]]
}
