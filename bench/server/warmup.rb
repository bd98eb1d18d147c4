# frozen_string_literal: true

# What a fresh worker spends on its first requests with and without a warm-up in the master
# (Weft::Server::Warmup), on Ruby 3.3 + YJIT:
#
#   bundle exec ruby bench/server/warmup.rb [WORKERS] [REQUESTS]     (on Ruby 3.3, YJIT on)
#
# Runs `weft serve -C bench/server/warmup/weft.rb -w 1` (preloaded; a batch endpoint shaped like
# ringpool's POST /allocations: 40 items parsed, answered, generated as JSON), cold and warm
# alternately, twice each; WARMUP_BENCH_MODES=cold,health,warm,... sets the runs and their order
# (health: a warm-up of GET /health alone, about Weft's own request path). In each run it kills
# the worker WORKERS times (default 5) and sends each fresh worker REQUESTS batches (default
# 200), one at a time on a keep-alive connection, then asks it (GET /__worker) for its CPU time
# and YJIT's compiled methods and compile time since it booted. Prints a line per worker and the
# medians per mode. RUBY_YJIT_ENABLE=0 for the interpreter's figures.
require "net/http"
require "json"
require "rbconfig"
require "tmpdir"
require_relative "../support/ports"

ROOT = File.expand_path("../..", __dir__)
WORKERS = Integer(ARGV.fetch(0, "5"))
REQUESTS = Integer(ARGV.fetch(1, "200"))
BODY = JSON.generate({ "allocations" => Array.new(40) { |i| { "ring_pool" => i * 3, "params" => { "i" => i } } } })

def now
  Process.clock_gettime(Process::CLOCK_MONOTONIC)
end

# @return [Hash] one fresh worker's figures
def measure_worker(port)
  http = Net::HTTP.new("127.0.0.1", port)
  http.start
  times = Array.new(REQUESTS) do
    started = now
    response = http.post("/allocations", BODY, "content-type" => "application/json")
    raise "status #{response.code}" unless response.code == "200"
    now - started
  end
  worker = JSON.parse(http.get("/__worker").body)
  http.finish
  worker.merge("first_ms" => (times.first * 1000).round(1), "all_ms" => (times.sum * 1000).round(1))
end

def run(mode, port)
  env = { "WARMUP_BENCH_WARM" => { cold: "0", warm: "1", health: "health" }.fetch(mode) }
  log = File.join(Dir.tmpdir, "warmup-bench-#{mode}.log")
  pid = Process.spawn(env, RbConfig.ruby, File.join(ROOT, "exe/weft"), "serve", "-C", File.join(__dir__, "warmup/weft.rb"),
                      "-w", "1", "-p", port.to_s, "-o", "127.0.0.1", out: log, err: log)
  sleep 0.1 until File.read(log).include?("booted") rescue sleep(0.1)
  Array.new(WORKERS) do
    figures = measure_worker(port)
    Process.kill("KILL", figures["pid"])
    sleep 0.6 # the replacement boots (at most one a second per slot; the first died at once)
    sleep 0.5
    figures
  end.tap { puts File.readlines(log).grep(/warmup/).map { |line| "  master: #{line.strip}" } }
ensure
  if pid
    Process.kill("TERM", pid)
    Process.wait(pid)
  end
end

def median(values)
  values = values.compact.sort
  values.empty? ? nil : values[values.size / 2]
end

yjit = defined?(RubyVM::YJIT) && RubyVM::YJIT.enabled?
puts "Ruby #{RUBY_VERSION}#{' + YJIT' if yjit}, #{WORKERS} fresh workers a run, #{REQUESTS} batches each; " \
     "load average #{File.read('/proc/loadavg').split.first(3).join(' ')}"
results = Hash.new { |hash, key| hash[key] = [] }
MODES = ENV.fetch("WARMUP_BENCH_MODES", "cold,warm,cold,warm").split(",").map(&:to_sym)
MODES.each do |mode|
  workers = run(mode, Bench.free_port)
  workers.each do |w|
    puts format("%-6s worker %6d: first request %6.1f ms, %d requests %7.1f ms, CPU %6.1f ms, compiled %s iseqs in %s ms",
                mode, w["pid"], w["first_ms"], REQUESTS, w["all_ms"], w["cpu_ms"], w["iseqs"].inspect, w["compile_ms"].inspect)
  end
  results[mode].concat(workers)
end
results.each do |mode, workers|
  puts format("%-6s medians of %d workers: first request %.1f ms, %d requests %.1f ms, CPU %.1f ms, compiled %s iseqs in %s ms",
              mode, workers.size, median(workers.map { |w| w["first_ms"] }), REQUESTS, median(workers.map { |w| w["all_ms"] }),
              median(workers.map { |w| w["cpu_ms"] }), median(workers.map { |w| w["iseqs"] }).inspect,
              median(workers.map { |w| w["compile_ms"] }).inspect)
end
puts "load average after: #{File.read('/proc/loadavg').split.first(3).join(' ')}"
