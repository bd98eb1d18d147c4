# frozen_string_literal: true

# The HTTP client against an upstream that is at its capacity: what growing the pool towards
# `limit` costs when callers have deadlines (docs/core.md, "A saturated upstream").
#
#   bundle exec ruby bench/http_client/saturated.rb [ROUNDS] [BURST] [DEADLINE]
#
# The upstream (this file again, in a process of its own) is a thread per keep-alive
# connection that serves CAPACITY requests at once, SERVICE seconds each, like a server with
# that many workers: 4 x 5 ms, 800 requests/s. Each variant gets a fresh upstream and one client,
# and sends ROUNDS bursts of BURST concurrent GETs (default 10 x 200), each under `deadline:`
# (0.1 s). It prints, per variant, the answers that came in time, their rate, the pool's size
# after each burst, and how many requests the upstream served: those beyond the answers in time
# were served for callers that had given up.
require_relative "support"

CAPACITY = 4
SERVICE = 0.005

if ARGV.first == "upstream"
  port = Integer(ARGV[1])
  slots = Thread::Queue.new
  CAPACITY.times { slots << true }
  served = 0
  lock = Thread::Mutex.new
  response = "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"
  server = TCPServer.new("127.0.0.1", port)
  server.listen(4096)
  # The count goes to a file on USR1: the benchmark reads it after each variant.
  Signal.trap(:USR1) { File.write(ARGV[2], served.to_s) }
  Signal.trap(:TERM) { exit!(0) }
  loop do
    Thread.new(server.accept) do |client|
      while client.gets
        nil until client.gets == "\r\n" # the rest of the head; GETs have no body
        slot = slots.pop
        sleep SERVICE
        slots << slot
        lock.synchronize { served += 1 }
        client.write(response)
      end
    rescue IOError, SystemCallError
      nil
    ensure
      client.close
    end
  end
end

require "weft/http"
require "weft/resilience"

rounds = Integer(ARGV.fetch(0, 10))
burst = Integer(ARGV.fetch(1, 200))
deadline = Float(ARGV.fetch(2, 0.1))

variants = {
  "limit: 1000" => { limit: 1000 },
  "limit: 64 (the default)" => {},
  "limit: 8" => { limit: 8 },
  # A breaker that never opens (its window is never full): only its bulkhead acts.
  "limit: 64, a breaker with bulkhead: Bulkhead.new(limit: 8, queue: 10_000)" =>
    { breaker: lambda {
      Weft::CircuitBreaker.new("saturated", register: false, window_calls: 100_000, minimum_calls: 100_000,
                                            bulkhead: Weft::Bulkhead.new(limit: 8, queue: 10_000))
    } }
}

puts "#{Bench.versions}; load #{File.read('/proc/loadavg').split.first(3).join(' ')}"
puts "upstream: #{CAPACITY} at once, #{(SERVICE * 1000).round(1)} ms each; #{rounds} bursts of #{burst}, deadline #{deadline} s"
puts
puts "| client | answered in time (of #{rounds * burst}) | answers in time / s | pool size after each burst | requests the upstream served |"
puts "|---|---:|---:|---|---:|"
variants.each do |name, options|
  port = Bench.free_port
  count_file = File.join(Bench::TMP, "saturated_served")
  upstream = Bench.spawn_server([RbConfig.ruby, __FILE__, "upstream", port.to_s, count_file], port, "saturated_upstream")
  options = options.transform_values { |value| value.respond_to?(:call) ? value.call : value }
  client = Weft::HTTP::Client.new("http://127.0.0.1:#{port}", proxy: nil, **options)
  in_time = 0
  sizes = []
  started = Bench.now
  rounds.times do
    Weft.run do
      Array.new(burst) do
        Weft.spawn do
          client.get("/", deadline: deadline).body
          in_time += 1
        rescue Weft::TimeoutError, Weft::Rejected
          nil # late (DeadlineExceeded), or refused by the bulkhead at the deadline
        end
      end.each(&:wait)
    end
    sizes << client.statistics.values.first[:size]
  end
  took = Bench.now - started
  client.close
  File.delete(count_file) if File.exist?(count_file)
  Process.kill(:USR1, upstream)
  sleep 0.05 until File.exist?(count_file) && !File.read(count_file).empty?
  puts "| #{name} | #{in_time} | #{(in_time / took).round} | #{sizes.join(' ')} | #{File.read(count_file)} |"
ensure
  Bench.stop(upstream)
end
