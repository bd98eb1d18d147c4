# frozen_string_literal: true

# The body of bin/demo: ringpool on a private PostgreSQL cluster kept in tmp/demo/postgres
# (created on the first run, reused after), sample ring pools, a gentle stream of allocation
# requests so the dashboard moves, until Ctrl-C.
#
#   PORT=9393        the public port
#   SHARDS=2         shards (weft workers)
#   DEMO_RATE=3      average allocation requests per second (10 items each); 0 for none
root = File.expand_path("../../..", __dir__)
$LOAD_PATH.unshift(File.join(root, "lib"))
require File.join(root, "test/support/postgres_cluster")
require "json"
require "net/http"
require "weft"
require "weft/http"
require File.join(root, "apps/ringpool/lib/ringpool/gc_environment")

$stdout.sync = true
port = Integer(ENV.fetch("PORT", "9393"))
shards = Integer(ENV.fetch("SHARDS", "2"))
rate = Float(ENV.fetch("DEMO_RATE", "3"))
base = "http://127.0.0.1:#{port}"
# Pool sizes and lockouts of the sample pools: small pools run out under the demo's traffic
# (the overflow number, reason "exhausted"), big ones do not.
SAMPLE_POOLS = [[2, 20], [3, 10], [5, 20], [8, 10], [10, 20], [15, 10], [20, 20], [25, 10], [30, 20], [40, 10],
                [50, 20], [60, 10], [80, 20], [100, 10], [120, 20], [150, 10], [200, 20], [250, 10], [300, 20], [400, 10]].freeze
ITEMS = 10

cluster = Weft::Test::PostgresCluster.new(keep_in: File.join(root, "tmp/demo/postgres"))
begin
  cluster.start
rescue Weft::Test::PostgresCluster::Error => e
  abort "bin/demo: PostgreSQL did not start (#{e.message.lines.first.strip}); remove tmp/demo/postgres to start afresh"
end
database_url = cluster.create_database("ringpool")
env = {
  "DATABASE_URL" => database_url, "RINGPOOL_BIND" => "tcp://127.0.0.1:#{port}", "RINGPOOL_SHARDS" => shards.to_s,
  "RINGPOOL_SOCKET_DIR" => File.join(root, "tmp/demo/sockets")
}.merge(Ringpool::GCEnvironment.for)
server = Process.spawn(env, RbConfig.ruby, File.join(root, "exe/weft"), "serve", "-C", File.join(root, "apps/ringpool/config/weft.rb"))

# The first shard to start creates the schema; the pools are made through the API, once.
def wait_for(what, seconds)
  deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + seconds
  loop do
    result = begin
      yield
    rescue SystemCallError, IOError, PG::Error, JSON::ParserError
      nil
    end
    return result if result
    raise "bin/demo: #{what} did not happen within #{seconds} s" if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
    sleep 0.2
  end
end

uniform = weighted = nil
traffic = nil
begin
  wait_for("the schema", 30) { cluster.psql("select to_regclass('ring_pools') as t", dbname: "ringpool").first["t"] }
  if cluster.psql("select count(*) as n from ring_pools", dbname: "ringpool").first["n"] == "0"
    first = 0
    SAMPLE_POOLS.each_with_index do |(size, lockout), index|
      numbers = Array.new(size) { |i| format("+1415%07d", first + i) }
      first += size
      spec = { "name" => "sample #{index + 1}", "numbers" => numbers, "overflow_number" => format("+1628%07d", index),
               "lockout_seconds" => lockout }
      wait_for("creating sample pool #{index + 1}", 30) do
        response = Net::HTTP.post(URI("#{base}/ring_pools"), JSON.generate(spec), "content-type" => "application/json")
        response.code == "201"
      end
    end
  end
  # Half the items go to any pool, half to pools in proportion to their size: the small pools
  # run out now and then, the big ones do not.
  sizes = cluster.psql("select id, (select count(*) from numbers n where n.ring_pool_id = p.id) as size from ring_pools p",
                       dbname: "ringpool").to_h { |row| [Integer(row["id"]), Integer(row["size"])] }
  uniform = sizes.keys
  weighted = sizes.flat_map { |id, size| [id] * size }
  wait_for("the shards' first ownership ticks", 30) do
    Net::HTTP.get_response(URI("#{base}/health")).code == "200"
  end
rescue StandardError => e
  Process.kill("TERM", server)
  Process.wait(server)
  cluster.stop
  abort e.message
end

sample = uniform.first
puts <<~TEXT

  ringpool: #{shards} shards, PostgreSQL kept in tmp/demo/postgres (#{database_url})

    dashboard   #{base}/
    #{rate.positive? ? "traffic     about #{rate} requests/s of #{ITEMS} allocations each (DEMO_RATE=0 for none)" : 'traffic     none (DEMO_RATE=0)'}

    curl -s #{base}/allocations -d '{"allocations": [{"ring_pool": #{sample}, "params": {"campaign": "spring"}}, {"ring_pool": #{sample}}]}'
    curl -s #{base}/ring_pools/#{sample}
    curl -s '#{base}/attribution?number=%2B14150000000'

  Ctrl-C stops it.
TEXT

if rate.positive?
  # The traffic source: its own thread and reactor, a rate that swells and ebbs over two
  # minutes so the charts have something to show. Sent open-loop: a slow answer does not slow
  # the sending.
  traffic = Thread.new do
    client = Weft::HTTP::Client.new(base, limit: 32)
    Weft.run do
      started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      sent = 0
      loop do
        elapsed = Process.clock_gettime(Process::CLOCK_MONOTONIC) - started
        current = rate * (1 + 0.6 * Math.sin(elapsed * Math::PI / 60))
        sleep(1.0 / current)
        sent += 1
        items = Array.new(ITEMS) { |i| { "ring_pool" => (i.even? ? uniform : weighted).sample, "params" => { "campaign" => "demo", "visit" => sent } } }
        Weft.spawn do
          client.post("/allocations", body: JSON.generate({ "allocations" => items }), headers: { "content-type" => "application/json" })
        rescue StandardError
          nil # the dashboard shows what the server saw; a refused request is the server's business
        end
      end
    end
  end
  traffic.report_on_exception = false
end

begin
  Process.wait(server)
rescue Interrupt, SignalException # Ctrl-C, or TERM: stop the shards gracefully first
  # A second Ctrl-C must not cut the stop short: raised inside it, it left a backtrace and could
  # leave PostgreSQL running. The terminal sends it to the server's processes too, which stop
  # on their own (the graceful stop of a demo's few requests takes well under a second).
  %w[INT TERM].each { |name| Signal.trap(name, "IGNORE") }
  traffic&.kill
  Process.kill("TERM", server)
  Process.wait(server)
ensure
  traffic&.kill
  cluster.stop
end
