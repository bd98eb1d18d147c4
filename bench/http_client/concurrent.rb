# frozen_string_literal: true

# 1,000 concurrent requests through one client, Weft::HTTP::Client (in Weft.run) vs
# Async::HTTP::Client (in Sync), both with the same connection limit, against the same plain
# threaded upstream (bench/http_client/upstream.rb, no delay) in its own process; with the
# connections each opens per round (the rounds are in rounds.rb).
#
#   bundle exec ruby bench/http_client/concurrent.rb [ROUNDS] [LIMIT]
require_relative "support"
require_relative "rounds"

ROUNDS = Integer(ARGV[0] || 5)
LIMIT = Integer(ARGV[1] || 100)
REQUESTS = ConcurrentRounds::REQUESTS

port = Bench.free_port
upstream = Bench.spawn_server(["ruby", "bench/http_client/upstream.rb", port.to_s, "0"], port, "upstream_fast")
url = "http://127.0.0.1:#{port}"

opened = Hash.new(0) # counter => connections opened
# async-http's client is bound to its reactor, so it is made per round; to be fair the Weft
# variant is also measured with a fresh client per round ("cold").
variants = {
  "Weft::HTTP::Client (pool kept)" => [:weft, ConcurrentRounds.weft_kept(url, LIMIT, opened)],
  "Weft::HTTP::Client (new client per round)" => [:weft_cold, ConcurrentRounds.weft_cold(url, LIMIT, opened)],
  "Async::HTTP::Client (new client per round)" => [:async, ConcurrentRounds.async(url, LIMIT, opened)]
}
results = {}
begin
  variants.each_value { |_, round| round.call } # warm-up
  opened.clear
  # Interleave the variants round by round so that background noise hits all alike.
  samples = Hash.new { |h, k| h[k] = [] }
  ROUNDS.times do
    variants.each do |label, (_, round)|
      started = Bench.now
      round.call
      samples[label] << REQUESTS / (Bench.now - started)
    end
  end
  samples.each { |label, rates| results[label] = rates.sort[rates.size / 2] }
ensure
  Bench::Processes.stop(upstream)
end

puts "## #{REQUESTS} concurrent requests through one client (limit #{LIMIT} connections, median of #{ROUNDS} rounds)"
puts
puts "| client | req/s | vs async-http | connections opened per round |"
puts "|---|---:|---:|---:|"
async_rate = results["Async::HTTP::Client (new client per round)"]
results.each do |label, rate|
  counter, = variants.fetch(label)
  puts format("| %s | %.0f | %.2fx | %.0f |", label, rate, rate / async_rate, opened[counter].to_f / ROUNDS)
end
puts
puts "```"
puts Bench.chart(results.to_a, "req/s (higher is better)")
puts "```"
