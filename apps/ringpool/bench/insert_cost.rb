# frozen_string_literal: true

# What PostgreSQL alone can store: pgbench running ringpool's allocation INSERT (40 rows per
# statement, into the allocations table as Ringpool::Schema makes it) against a private
# throwaway cluster (fsync off, as the tests run it), to tell where the database becomes the
# limit (see README, "Beyond one machine").
#
#   bundle exec ruby apps/ringpool/bench/insert_cost.rb [clients] [seconds]
root = File.expand_path("../../..", __dir__)
$LOAD_PATH.unshift(File.join(root, "lib"))
require File.join(root, "test/support/postgres_cluster")
require_relative "../lib/ringpool"
require "tmpdir"

clients = Integer(ARGV[0] || 4)
seconds = Integer(ARGV[1] || 10)
cluster = Weft::Test::PostgresCluster.new.start
begin
  url = cluster.create_database("insert_cost")
  # The app's own tables (Ringpool::Schema), so the figure follows its migrations.
  db = Weft::Postgres::Pool.new(url, limit: 1)
  Weft.run { Ringpool::Schema.migrate(db) }
  db.close
  Dir.mktmpdir do |dir|
    script = File.join(dir, "alloc.sql")
    File.write(script, <<~SQL)
      \\set base random(0, 2000000)
      insert into allocations (ring_pool_id, number, lockout, params)
      select 1, '+1555' || lpad((:base + g)::text, 7, '0'), tstzrange(now(), now() + interval '60 seconds'), '{"i":1}'::jsonb
        from generate_series(1, 40) g on conflict do nothing;
    SQL
    info = PG::Connection.conninfo_parse(url).to_h { |option| [option[:keyword], option[:val]] }
    command = ["pgbench", "-n", "-f", script, "-c", clients.to_s, "-j", [clients, 2].min.to_s, "-T", seconds.to_s,
               "-h", info["host"], "-p", info["port"], "-U", info["user"] || "postgres", "insert_cost"]
    output = IO.popen(command, err: %i[child out], &:read)
    abort output unless $?.success?
    tps = output[/tps = ([\d.]+)/, 1].to_f
    puts output.lines.grep(/latency average|tps/)
    puts format("=> %.0f allocations/s (40 per statement), %d clients, %d s", tps * 40, clients, seconds)
  end
ensure
  cluster.destroy
end
