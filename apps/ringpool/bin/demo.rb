# frozen_string_literal: true

# The body of bin/demo: a private PostgreSQL cluster (the one the tests use), then
# `weft serve -C apps/ringpool/config/weft.rb` on it until Ctrl-C.
root = File.expand_path("../../..", __dir__)
require File.join(root, "test/support/postgres_cluster")
require "pg"

port = Integer(ENV.fetch("PORT", "9393"))
shards = Integer(ENV.fetch("SHARDS", "2"))
cluster = Weft::Test::PostgresCluster.new.start
database_url = cluster.create_database("ringpool")
env = {
  "DATABASE_URL" => database_url, "RINGPOOL_BIND" => "tcp://127.0.0.1:#{port}", "RINGPOOL_SHARDS" => shards.to_s,
  "RINGPOOL_SOCKET_DIR" => File.join(cluster.base_dir, "ringpool-sockets")
}
base = "http://127.0.0.1:#{port}"
puts <<~TEXT
  ringpool: #{shards} shards on #{base}, PostgreSQL at #{database_url} (deleted on exit)

    curl -s #{base}/ring_pools -d '{"numbers": ["+14155550101", "+14155550102"], "overflow_number": "+14155550100", "lockout_seconds": 60}'
    curl -s #{base}/allocations -d '{"allocations": [{"ring_pool": 1, "params": {"campaign": "spring"}}, {"ring_pool": 1}, {"ring_pool": 1}]}'
    curl -s #{base}/ring_pools/1
    curl -s '#{base}/attribution?number=%2B14155550101'
    curl -s #{base}/health

  Ctrl-C stops it.
TEXT
pid = Process.spawn(env, RbConfig.ruby, File.join(root, "exe/weft"), "serve", "-C", File.join(root, "apps/ringpool/config/weft.rb"))
begin
  Process.wait(pid)
rescue Interrupt, SignalException # Ctrl-C, or TERM: stop the shards gracefully first
  Process.kill("TERM", pid)
  Process.wait(pid)
ensure
  cluster.destroy
end
