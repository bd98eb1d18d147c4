# frozen_string_literal: true

# What Weft.scatter, Weft.hedge and Weft::Retry cost on top of the work they guard, and how the
# ring-pool case (40 items over 4 shards, one silent) behaves over real sockets.
#
#   bundle exec ruby bench/resilience/fan_out.rb
#
# Prints a Markdown table; docs/resilience.md quotes it.
require_relative "../support/bundle"
$LOAD_PATH.unshift(File.expand_path("../../lib", __dir__))
require "weft/resilience"
require "weft/http"
require "socket"

CALLS = Integer(ENV.fetch("CALLS", "5000"))
ROUNDS = Integer(ENV.fetch("ROUNDS", "7"))

# @return [Float] microseconds per call of the block
def per_call
  GC.start
  started = Weft::Timers.now
  CALLS.times { yield }
  (Weft::Timers.now - started) / CALLS * 1e6
end

# Rows run in turn, ROUNDS times over, so that background load hits them alike; the median
# round is reported.
rows = Weft.run do
  items = (1..10).to_a
  fallback = ->(_item, _error) { 0 }
  hedge = Weft::Hedge.new(after: 0.05, max: 2)
  policy = Weft::Retry.new
  cases = {
    "10 trivial items: `Weft.gather` of 10 `Weft.spawn`" => -> { Weft.gather(items.map { |i| Weft.spawn { i } }) },
    "10 trivial items: `Weft.map`" => -> { Weft.map(items) { |i| i } },
    "10 trivial items: `Weft.scatter`" => -> { Weft.scatter(items) { |i| i } },
    "10 trivial items: `Weft.scatter(deadline: 1, fallback:)`" =>
      -> { Weft.scatter(items, deadline: 1, fallback: fallback) { |i| i } },
    "10 items, 5 raising: `Weft.scatter(deadline: 1, fallback:)`" =>
      -> { Weft.scatter(items, deadline: 1, fallback: fallback) { |i| i.odd? ? raise(IOError) : i } },
    "one fast attempt: `Weft::Hedge#call`" => -> { hedge.call { 1 } },
    "one successful attempt: `Weft::Retry#call`" => -> { policy.call { 1 } }
  }
  cases.each_value(&:call) # warm up
  samples = Hash.new { |hash, key| hash[key] = [] }
  ROUNDS.times { cases.each { |name, work| samples[name] << per_call(&work) } }
  samples.map { |name, micros| [name, micros.sort[micros.size / 2]] }
end

# The ring-pool case: 40 items over 4 shards (tiny thread-per-connection HTTP servers in a
# child process, so they do not compete for this process's GVL), one of which accepts and never
# answers; a 200 ms deadline; overflow answers for the silent shard.
servers = Array.new(4) { TCPServer.new("127.0.0.1", 0) }
ports = servers.map { |server| server.addr[1] }
shards = fork do
  servers.each_with_index.map do |server, n|
    Thread.new do
      loop do
        socket = server.accept
        Thread.new do
          while socket.gets
            line = nil
            line = socket.gets until line == "\r\n"
            socket.write("HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok") unless n == 3
          end
        rescue IOError, SystemCallError
          nil
        end
      end
    end
  end.each(&:join)
end
servers.each(&:close)
clients = ports.map { |port| Weft::HTTP::Client.new("http://127.0.0.1:#{port}") }
ring = Weft.run do
  shard_call = lambda do
    Weft.scatter(0...40, deadline: 0.2, fallback: ->(_item, _error) { :overflow }) { |i| clients[i % 4].get("/").body }
  end
  shard_call.call # connect
  laps = Array.new(20) do
    started = Weft::Timers.now
    results = shard_call.call
    raise "expected 10 overflows" unless results.count(:overflow) == 10
    Weft::Timers.now - started
  end
  laps.sort
end
clients.each(&:close)
Process.kill(:KILL, shards)
Process.wait(shards)

puts "| call | µs per call |"
puts "|---|---:|"
rows.each { |name, micros| puts format("| %s | %.1f |", name, micros) }
puts
puts format("ring-pool case, 40 items over 4 shards, one silent, deadline 200 ms (20 calls): " \
            "median %.1f ms, max %.1f ms (%.1f ms past the deadline at most)",
            ring[ring.size / 2] * 1000, ring.last * 1000, (ring.last - 0.2) * 1000)
puts "ruby #{RUBY_VERSION}, median of #{ROUNDS} rounds of #{CALLS} calls per row"
