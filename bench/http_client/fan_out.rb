# frozen_string_literal: true

# Seed 004's case: a Rack app makes one outbound call per request to an upstream that answers
# in 150 ms; `ab -c 30` drives it. At 30 concurrent requests the delay caps throughput at
# 30 / 0.15 = 200 req/s; the question is how close each stack gets.
#
#   bundle exec ruby bench/http_client/fan_out.rb [REQUESTS]
#
# Stacks (one process each, same machine, loopback):
#   Weft server (-w 0) + Weft::HTTP::Client
#   Weft server (-w 0) + plain Net::HTTP (a new connection per call, still concurrent)
#   Puma (-t 5:5 -w 0) + Net::HTTP
#   Falcon (--count 1) + async-http
require_relative "support"

REQUESTS = Integer(ARGV[0] || 600)
CONCURRENCY = 30
DELAY = 0.15

abort "ab not found (apt-get install -y apache2-utils, or bin/setup --bench)" unless system("which ab > /dev/null")

upstream_port = Bench.free_port
upstream = Bench.spawn_server(["ruby", "bench/http_client/upstream.rb", upstream_port.to_s, DELAY.to_s],
                              upstream_port, "upstream_150ms")
env = { "UPSTREAM" => "http://127.0.0.1:#{upstream_port}" }

weft_available = File.exist?(File.join(Bench::ROOT, "exe/weft")) && File.exist?(File.join(Bench::ROOT, "lib/weft/server.rb"))
stacks = {
  "Weft server + Weft::HTTP::Client" => lambda do |port|
    weft_available && %W[bundle exec exe/weft serve bench/http_client/app_weft.ru -b tcp://127.0.0.1:#{port} -w 0 -q]
  end,
  "Weft server + plain Net::HTTP" => lambda do |port|
    weft_available && %W[bundle exec exe/weft serve bench/http_client/app_net_http.ru -b tcp://127.0.0.1:#{port} -w 0 -q]
  end,
  "Puma (5 threads) + Net::HTTP" => ->(port) { %W[bundle exec puma -q -b tcp://127.0.0.1:#{port} -t 5:5 -w 0 bench/http_client/app_net_http.ru] },
  "Falcon + async-http" => lambda do |port|
    %W[bundle exec falcon serve -b http://127.0.0.1:#{port} --count 1 -c bench/http_client/app_async_http.ru]
  end
}

def ab(port, requests)
  output = `ab -q -s 10 -c #{CONCURRENCY} -n #{requests} http://127.0.0.1:#{port}/ 2>&1`
  rps = output[/Requests per second:\s+([\d.]+)/, 1]
  failed = output[/Failed requests:\s+(\d+)/, 1].to_i
  non2xx = output[/Non-2xx responses:\s+(\d+)/, 1].to_i
  p50 = output[/^\s+50%\s+(\d+)/, 1]
  p99 = output[/^\s+99%\s+(\d+)/, 1]
  raise "ab failed:\n#{output}" unless rps
  { rps: rps.to_f, failed: failed + non2xx, p50: p50.to_i, p99: p99.to_i }
end

results = {}
begin
  stacks.each do |label, command_for|
    port = Bench.free_port
    command = command_for.call(port)
    unless command
      results[label] = nil
      next
    end
    pid = Bench.spawn_server(command, port, label.downcase.gsub(/\W+/, "_"), env: env)
    begin
      ab(port, CONCURRENCY * 2) # warm-up: connections, code paths
      results[label] = ab(port, REQUESTS)
    ensure
      Bench::Processes.stop(pid)
    end
  end
ensure
  Bench::Processes.stop(upstream)
end

ceiling = CONCURRENCY / DELAY
puts "## Rack app, one upstream call (150 ms) per request, ab -c #{CONCURRENCY} -n #{REQUESTS}"
puts
puts "| stack | req/s | % of #{ceiling.round} req/s ceiling | p50 ms | p99 ms | failed |"
puts "|---|---:|---:|---:|---:|---:|"
results.each do |label, r|
  if r
    puts format("| %s | %.1f | %.0f%% | %d | %d | %d |", label, r[:rps], r[:rps] / ceiling * 100, r[:p50], r[:p99], r[:failed])
  else
    puts "| #{label} | not run (no Weft server in this tree) | | | | |"
  end
end
puts
weft = results["Weft server + Weft::HTTP::Client"]
puts "Weft server + client: #{format('%.0f', weft[:rps] / ceiling * 100)}% of the ceiling (target >= 95%)" if weft
puts
puts "```"
puts Bench.chart(results.compact.map { |label, r| [label, r[:rps]] }, "req/s (higher is better)")
puts "```"
