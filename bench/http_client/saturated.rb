# frozen_string_literal: true

# The HTTP client against an upstream that is at its capacity, and against ones that are slow
# but serve in parallel: what growing the pool towards `limit` costs when callers have
# deadlines, and whether the adaptive in-flight limit (`adaptive: true`) avoids it without
# holding back the parallel ones (docs/core.md, "A saturated upstream").
#
#   bundle exec ruby bench/http_client/saturated.rb [ROUNDS] [BURST] [UPSTREAMS]
#
# Each upstream (this file again, in a process of its own) is a thread per keep-alive
# connection that serves CAPACITY requests at once, SERVICE seconds each, like a server with
# that many workers, and queues the rest:
# * saturated: 4 at once x 5 ms (800 requests/s); each request under `deadline: 0.1`;
# * parallel: 100 at once x 200 ms (500 requests/s), an API that is slow but has room; each
#   request under `deadline: 2`;
# * spread: 100 at once x 10-310 ms (each request draws its own), an API with room whose
#   latencies vary far more than the adaptive limit tolerates without an experiment (mean 16
#   times its fastest answer); each request under `deadline: 2`.
# Each variant gets a fresh upstream and one client, and sends ROUNDS bursts of BURST
# concurrent GETs (default 10 x 200). It prints, per variant, the answers that came in time,
# their rate, the pool's size and in-flight limit after each burst, how many requests the
# upstream served (those beyond the answers in time were served for callers that had given up)
# and the most it held at once (serving or queued). UPSTREAMS: "saturated,parallel,spread"
# (default).
require_relative "support"

if ARGV.first == "upstream"
  port = Integer(ARGV[1])
  capacity = Integer(ARGV[3])
  service = Float(ARGV[4])
  spread = Float(ARGV[5])
  slots = Thread::Queue.new
  capacity.times { slots << true }
  served = 0
  held = peak = 0
  lock = Thread::Mutex.new
  response = "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"
  server = TCPServer.new("127.0.0.1", port)
  server.listen(4096)
  # The counts go to a file on USR1: the benchmark reads them after each variant.
  Signal.trap(:USR1) { File.write(ARGV[2], "#{served} #{peak}") }
  Signal.trap(:TERM) { exit!(0) }
  loop do
    Thread.new(server.accept) do |client|
      while client.gets
        nil until client.gets == "\r\n" # the rest of the head; GETs have no body
        lock.synchronize { peak = held if (held += 1) > peak }
        slot = slots.pop
        sleep service + (rand * spread)
        slots << slot
        lock.synchronize do
          held -= 1
          served += 1
        end
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
upstreams = ARGV.fetch(2, "saturated,parallel,spread").split(",")

UPSTREAMS = {
  "saturated" => { capacity: 4, service: 0.005, spread: 0.0, deadline: 0.1 },
  "parallel" => { capacity: 100, service: 0.2, spread: 0.0, deadline: 2.0 },
  "spread" => { capacity: 100, service: 0.01, spread: 0.3, deadline: 2.0 }
}.freeze

variants = {
  "limit: 8" => { limit: 8 },
  "limit: 64 (the default), fixed" => {},
  "limit: 64, adaptive" => { adaptive: true },
  "limit: 1000, fixed" => { limit: 1000 },
  "limit: 1000, adaptive" => { limit: 1000, adaptive: true }
}

puts "#{Bench.versions}; load #{File.read('/proc/loadavg').split.first(3).join(' ')}"
puts "#{rounds} bursts of #{burst} concurrent GETs per variant"
upstreams.each do |kind|
  capacity, service, spread, deadline = UPSTREAMS.fetch(kind).values_at(:capacity, :service, :spread, :deadline)
  took_ms = spread.zero? ? (service * 1000).round(1) : "#{(service * 1000).round}-#{((service + spread) * 1000).round}"
  puts
  puts "#{kind} upstream: #{capacity} at once, #{took_ms} ms each; deadline #{deadline} s"
  puts
  puts "| client | answered in time (of #{rounds * burst}) | answers in time / s | pool size / in-flight limit after each burst | requests the upstream served | most it held at once |"
  puts "|---|---:|---:|---|---:|---:|"
  variants.each do |name, options|
    port = Bench.free_port
    count_file = File.join(Bench::TMP, "saturated_served")
    command = [RbConfig.ruby, __FILE__, "upstream", port.to_s, count_file, capacity.to_s, service.to_s, spread.to_s]
    upstream = Bench.spawn_server(command, port, "saturated_upstream")
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
          rescue Weft::TimeoutError
            nil # late (DeadlineExceeded)
          end
        end.each(&:wait)
      end
      stats = client.statistics.values.first
      sizes << "#{stats[:size]}/#{stats[:in_flight_limit]}"
    end
    took = Bench.now - started
    client.close
    File.delete(count_file) if File.exist?(count_file)
    Process.kill(:USR1, upstream)
    sleep 0.05 until File.exist?(count_file) && !File.read(count_file).empty?
    served, peak = File.read(count_file).split
    puts "| #{name} | #{in_time} | #{(in_time / took).round} | #{sizes.join(' ')} | #{served} | #{peak} |"
  ensure
    Bench::Processes.stop(upstream)
  end
end
