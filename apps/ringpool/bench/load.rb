# frozen_string_literal: true

# A load run against a real ringpool cluster on a throwaway PostgreSQL:
#
#   bundle exec ruby apps/ringpool/bench/load.rb [seconds] [shards] [connections] [items]
#
# (defaults 10 s, 4 shards, 16 keep-alive connections, 40 items per request). It starts the
# cluster (weft serve -C apps/ringpool/config/weft.rb), creates 40 pools of 500 numbers with a
# 1 s lockout, then sends POST /allocations from `connections` concurrent fibers, each item
# for a random pool, and prints requests/s, latency percentiles and the answers by kind.
# The load generator runs on the same machine and takes CPU from the shards.
root = File.expand_path("../../..", __dir__)
$LOAD_PATH.unshift(File.join(root, "lib"))
require File.join(root, "test/support/postgres_cluster")
require "weft"
require "weft/http"
require "json"
require "socket"
require "tmpdir"

seconds = Float(ARGV[0] || 10)
shards = Integer(ARGV[1] || 4)
connections = Integer(ARGV[2] || 16)
items_per_request = Integer(ARGV[3] || 40)

cluster = Weft::Test::PostgresCluster.new.start
database_url = cluster.create_database("ringpool")
port = TCPServer.new("127.0.0.1", 0).then { |server| server.addr[1].tap { server.close } }
sockets = Dir.mktmpdir("ringpool-bench")
env = { "DATABASE_URL" => database_url, "RINGPOOL_BIND" => "tcp://127.0.0.1:#{port}", "RINGPOOL_SHARDS" => shards.to_s,
        "RINGPOOL_SOCKET_DIR" => sockets, "RINGPOOL_DEADLINE_MS" => ENV.fetch("RINGPOOL_DEADLINE_MS", "50") }
pid = Process.spawn(env, RbConfig.ruby, File.join(root, "exe/weft"), "serve", "-C", File.join(root, "apps/ringpool/config/weft.rb"),
                    out: File::NULL, err: File.join(sockets, "weft.log"))
begin
  api = Weft::HTTP::Client.new("http://127.0.0.1:#{port}", limit: connections, read_timeout: 10)
  json = { "content-type" => "application/json" }
  Weft.run do
    sleep 0.1 until (api.get("/health").status == 200 rescue false) # rubocop:disable Style/RescueModifier
    pools = Array.new(40) do |p|
      numbers = Array.new(500) { |n| format("+1%03d%07d", 200 + p, n) }
      body = JSON.generate({ "numbers" => numbers, "overflow_number" => format("+1%03d9999999", 200 + p), "lockout_seconds" => 1 })
      tries = 0
      begin
        created = JSON.parse(api.post("/ring_pools", body: body, headers: json).body)
        created.fetch("id")
      rescue KeyError # 503 until the first shard has migrated the schema
        raise "could not create a pool: #{created}" if (tries += 1) > 50
        sleep 0.1
        retry
      end
    end
    sleep 3 # let the shards share the pools out (ownership ticks every second)
    latencies = []
    kinds = Hash.new(0)
    stop_at = Weft::Timers.now + seconds
    workers = Array.new(connections) do
      Weft.spawn do
        while Weft::Timers.now < stop_at
          items = Array.new(items_per_request) { { "ring_pool" => pools.sample, "params" => { "campaign" => "bench" } } }
          started = Weft::Timers.now
          response = api.post("/allocations", body: JSON.generate({ "allocations" => items }), headers: json)
          latencies << Weft::Timers.now - started
          JSON.parse(response.body)["allocations"].each { |a| kinds[a["overflow"] ? a["reason"] : "tracked"] += 1 }
        end
      end
    end
    Weft.gather(workers)
    latencies.sort!
    pct = ->(q) { (latencies[(latencies.size * q).floor.clamp(0, latencies.size - 1)] * 1000).round(1) }
    puts format("%d shards, %d connections, %d items/request, %.0f s: %d requests, %.0f req/s, %.0f allocations/s",
                shards, connections, items_per_request, seconds, latencies.size, latencies.size / seconds, latencies.size * items_per_request / seconds)
    puts "latency ms: p50 #{pct.call(0.5)}  p90 #{pct.call(0.9)}  p99 #{pct.call(0.99)}  max #{(latencies.last * 1000).round(1)}"
    puts "answers: #{kinds.sort.to_h}"
  end
ensure
  if pid
    Process.kill("TERM", pid)
    Process.wait(pid)
  end
  cluster.destroy
  FileUtils.rm_rf(sockets)
end
