# frozen_string_literal: true

# How `weft serve -w 2` shares wrk's keep-alive connections, and their requests, between its
# two workers on the shared listening socket, with `spread_connections` off (every worker
# accepts as soon as it wakes, the behaviour before AcceptSpread) and on (the default).
#
#   bundle exec ruby bench/server/spread.rb                 (Ruby 3.1)
#   /work/wt/r33.sh bundle exec ruby bench/server/spread.rb (Ruby 3.3 + YJIT: RUBY_YJIT_ENABLE=1)
#       BENCH_DURATION=5 seconds per wrk run; PATHS=/,/sleep,/cpu; CONNECTIONS=64,256
#
# Two clusters run at once, one per setting, each idle while the other is measured, taking
# turns for each app and connection count (bench/server/spread_app.ru: hello world, a 1 ms
# fiber sleep, 1 ms of CPU). Per row: wrk -t1 -cN --latency (requests/s, p50, p99); each
# worker's open connections, from /stats halfway through the run (the connection that asks is
# one of them: counted, on the worker that answers it); each worker's requests over the run,
# from /stats before and after (a worker publishes its figures once a second: the second read
# waits 1.2 s); how often a worker left a queued connection to its sibling (accepts_deferred).
# Printed as a Markdown table; the load average beside every row.
require_relative "../server"
require "json"
require "tmpdir"

module SpreadBench
  APP = File.join(__dir__, "spread_app.ru")
  DURATION = Integer(ENV.fetch("BENCH_DURATION", "5"))
  PATHS = ENV.fetch("PATHS", "/,/sleep,/cpu").split(",")
  CONNECTIONS = ENV.fetch("CONNECTIONS", "64,256").split(",").map { |count| Integer(count) }
  SETTINGS = { "off" => false, "on" => true }.freeze

  module_function

  def run
    puts "#{RUBY_DESCRIPTION}; load at start #{load_average}"
    Dir.mktmpdir("weft-spread") do |dir|
      clusters = SETTINGS.to_h { |name, value| [name, start(dir, name, value)] }
      clusters.each_value { |port, _| wrk(port, "/", 64, 1) } # warm-up
      puts "| request | connections | spread | requests/s | p50 ms | p99 ms | connections per worker | requests per worker | deferred | load |"
      puts "|---|---:|---|---:|---:|---:|---|---|---:|---:|"
      PATHS.each do |path|
        CONNECTIONS.each do |connections|
          clusters.each { |name, (port, _)| puts row(path, connections, name, port) }
        end
      end
    ensure
      clusters&.each_value { |_, pid| ServerBench.stop(pid) }
    end
    puts "load at end #{load_average}"
  end

  # Starts `weft serve -w 2` with the setting, in a process group of its own.
  # @return [Array(Integer, Integer)] port and master pid
  def start(dir, name, value)
    config = File.join(dir, "#{name}.rb")
    File.write(config, "workers 2\nspread_connections #{value}\nstats_path \"/stats\"\n")
    port = Bench.free_port
    pid = Process.spawn(RbConfig.ruby, File.join(ROOT, "exe/weft"), "serve", APP, "-C", config,
                        "-o", "127.0.0.1", "-p", port.to_s, "-q", chdir: ROOT,
                        out: File::NULL, err: File::NULL, pgroup: true)
    ServerBench.wait_until_serving(port, pid)
    sleep 0.5 until workers(port).size == 2
    [port, pid]
  end

  def row(path, connections, name, port)
    before = workers(port)
    halfway = Thread.new do
      sleep DURATION / 2.0
      workers(port)
    end
    result = wrk(port, path, connections, DURATION)
    open = halfway.value
    sleep 1.2 # each worker's published figures are up to a second old
    after = workers(port)
    pids = after.keys.sort
    open_counts = pids.map { |pid| open.dig(pid, :connections_open).to_i }
    requests = pids.map { |pid| after.dig(pid, :requests).to_i - before.dig(pid, :requests).to_i }
    deferred = pids.sum { |pid| after.dig(pid, :accepts_deferred).to_i - before.dig(pid, :accepts_deferred).to_i }
    total = requests.sum.nonzero? || 1
    format("| %s | %d | %s | %.0f | %.2f | %.2f | %s | %s | %d | %s |", path, connections, name, result[:rps], result[:p50].to_f,
           result[:p99].to_f, open_counts.join(" / "),
           "#{requests.join(' / ')} (#{requests.map { |count| (100.0 * count / total).round }.join('/')}%)",
           deferred, load_average)
  end

  # ServerBench.wrk (wrk -t1 --latency: requests/s of successful responses, p50 and p99 in ms),
  # with its socket errors and non-2xx answers on stderr, off the table.
  # @return [Hash]
  def wrk(port, path, connections, seconds)
    result = ServerBench.wrk(port, path, connections, seconds)
    warn "#{path}, #{connections} connections: #{result[:errors]}" if result[:errors]
    result
  end

  # @return [Hash] pid => that worker's statistics (symbol keys)
  def workers(port)
    body = Net::HTTP.start("127.0.0.1", port) { |http| http.get("/stats", "connection" => "close").body }
    JSON.parse(body, symbolize_names: true)[:workers].to_h { |worker| [worker[:pid], worker] }
  end

  def load_average
    File.read("/proc/loadavg").split.first
  end
end

SpreadBench.run if $PROGRAM_NAME == __FILE__
