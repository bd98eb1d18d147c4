# frozen_string_literal: true

# 1,000 concurrent requests through one client, Weft::HTTP::Client (in Weft.run) vs
# Async::HTTP::Client (in Sync), both with the same connection limit, against the same plain
# threaded upstream (bench/http_client/upstream.rb, no delay) in its own process.
#
#   bundle exec ruby bench/http_client/concurrent.rb [ROUNDS] [LIMIT]
require_relative "support"
require "weft/http"
require "async"
require "async/barrier"
require "async/http/client"
require "async/http/endpoint"

ROUNDS = Integer(ARGV[0] || 5)
LIMIT = Integer(ARGV[1] || 100)
REQUESTS = 1_000

port = Bench.free_port
upstream = Bench.spawn_server(["ruby", "bench/http_client/upstream.rb", port.to_s, "0"], port, "upstream_fast")
url = "http://127.0.0.1:#{port}"

weft = Weft::HTTP::Client.new(url, proxy: nil, limit: LIMIT)
weft_round = lambda do
  Weft.run do
    bodies = Weft.map(1..REQUESTS) { weft.get("/").body }
    raise "wrong body" unless bodies.all? { |body| body.bytesize == 22 }
  end
end

endpoint = Async::HTTP::Endpoint.parse(url)
async_round = lambda do
  Sync do
    client = Async::HTTP::Client.new(endpoint, limit: LIMIT)
    barrier = Async::Barrier.new
    sizes = []
    REQUESTS.times { barrier.async { sizes << client.get("/").read.bytesize } }
    barrier.wait
    raise "wrong body" unless sizes.size == REQUESTS && sizes.all?(22)
  ensure
    client&.close
  end
end

# async-http's client is bound to its reactor, so it is made per round; to be fair the Weft
# variant is also measured with a fresh client per round ("cold").
weft_cold_round = lambda do
  client = Weft::HTTP::Client.new(url, proxy: nil, limit: LIMIT)
  Weft.run { Weft.map(1..REQUESTS) { client.get("/").body } }
  client.close
end

variants = { "Weft::HTTP::Client (pool kept)" => weft_round, "Weft::HTTP::Client (new client per round)" => weft_cold_round,
             "Async::HTTP::Client (new client per round)" => async_round }
results = {}
begin
  variants.each_value(&:call) # warm-up
  # Interleave the variants round by round so that background noise hits all alike.
  samples = Hash.new { |h, k| h[k] = [] }
  ROUNDS.times do
    variants.each do |label, round|
      started = Bench.now
      round.call
      samples[label] << REQUESTS / (Bench.now - started)
    end
  end
  samples.each { |label, rates| results[label] = rates.sort[rates.size / 2] }
ensure
  Bench.stop(upstream)
end

puts "## #{REQUESTS} concurrent requests through one client (limit #{LIMIT} connections, median of #{ROUNDS} rounds)"
puts
puts "| client | req/s | vs async-http |"
puts "|---|---:|---:|"
async_rate = results["Async::HTTP::Client (new client per round)"]
results.each { |label, rate| puts format("| %s | %.0f | %.2fx |", label, rate, rate / async_rate) }
puts
puts "```"
puts Bench.chart(results.to_a, "req/s (higher is better)")
puts "```"
