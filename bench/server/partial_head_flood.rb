# frozen_string_literal: true

# What a flood of small parked partial heads costs a single-process `weft serve`, and what
# partial_head_budget counts of it: RSS growth while BENCH_HEADS (2,000) connections each hold
# a partial head, with the budget (64 MiB, the default) and without (nil); the bytes the
# budget (Weft::Server::PartialHeads#bytes) says are held; and what the process's Strings grew
# by (ObjectSpace.memsize_of_all after a GC: RSS keeps what malloc freed, and also counts the
# garbage the big heads' requests made).
#
#   bundle exec ruby bench/server/partial_head_flood.rb            (both shapes, both budgets)
#   BENCH_SHAPE=after_big_head bundle exec ruby bench/server/partial_head_flood.rb
#
# Two shapes of flood, both leaving 30 bytes of the next head parked per connection:
#   fresh           the 30 bytes alone, on a new connection
#   after_big_head  one complete request with a PAD (60,000) byte header, then the 30 bytes, in
#                   one write: the server answers the first request and parks the second's head
require_relative "../server"
require "tmpdir"

HEADS = Integer(ENV.fetch("BENCH_HEADS", "2000"))
PAD = Integer(ENV.fetch("BENCH_PAD", "60000"))
SHAPES = ENV.fetch("BENCH_SHAPE", "fresh,after_big_head").split(",")
PARTIAL = "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n"[0, 30]
# The app answers / and reports, at /heads, what the process's PartialHeads count and the memory
# of its Strings after a full GC.
APP_SOURCE = <<~RUBY
  require "objspace"
  run lambda { |env|
    body = if env["PATH_INFO"] == "/heads"
      heads = ObjectSpace.each_object(Weft::Server::PartialHeads).to_a
      GC.start
      "\#{heads.sum(&:size)} \#{heads.sum(&:bytes)} \#{ObjectSpace.memsize_of_all(String)}"
    else
      "ok"
    end
    [200, { "content-type" => "text/plain" }, [body]]
  }
RUBY

# @return [String] what each connection sends
def flood_bytes(shape)
  case shape
  when "fresh" then PARTIAL
  when "after_big_head" then "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: #{'p' * PAD}\r\n\r\n#{PARTIAL}"
  else raise ArgumentError, "BENCH_SHAPE: fresh or after_big_head, not #{shape}"
  end
end

# Opens HEADS connections, each sending `bytes` (and reading the answer to a complete first
# request), and yields while they are held.
def hold_flood(port, bytes, answered)
  sockets = Array.new(HEADS) do
    socket = Socket.tcp("127.0.0.1", port, connect_timeout: 5)
    socket.write(bytes)
    if answered
      response = +""
      response << socket.readpartial(4096) until response.end_with?("ok")
    end
    socket
  end
  yield sockets.size
ensure
  sockets&.each(&:close)
end

def heads_counted(port)
  Net::HTTP.get(URI("http://127.0.0.1:#{port}/heads")).split.map(&:to_i)
end

Process.setrlimit(:NOFILE, Process.getrlimit(:NOFILE)[1])
ENV["RACK_ENV"] = "production"
rows = []
Dir.mktmpdir("weft-partial-head-flood") do |dir|
  app = File.join(dir, "app.ru")
  File.write(app, APP_SOURCE)
  { "64 MiB" => 64 << 20, "none" => nil }.each do |budget_name, budget|
    config = File.join(dir, "weft.rb")
    File.write(config, "partial_head_budget #{budget.inspect}\n")
    SHAPES.each do |shape|
      port = Bench.free_port
      command = [RbConfig.ruby, File.join(ROOT, "exe/weft"), "serve", app, "-C", config, "-o", "127.0.0.1", "-p", port.to_s,
                 "-w", "0", "-q"]
      pid = Process.spawn(*command, chdir: ROOT, out: File::NULL, err: File::NULL, pgroup: true)
      begin
        ServerBench.wait_until_serving(port, pid)
        sleep 1
        before = ServerBench.tree_rss(pid)
        strings_before = heads_counted(port).last
        hold_flood(port, flood_bytes(shape), shape == "after_big_head") do |held|
          sleep 2 # the last heads parked
          parked, counted, strings = heads_counted(port)
          rows << [shape, budget_name, held, parked, counted, (strings - strings_before) / 1048576.0,
                   (ServerBench.tree_rss(pid) - before) / 1048576.0]
        end
      ensure
        ServerBench.stop(pid)
      end
    end
  end
end
puts "#{HEADS} connections, #{PARTIAL.bytesize} bytes of partial head each, Ruby #{RUBY_VERSION}, load #{File.read('/proc/loadavg').split.first(3).join(' ')}",
     "", "| flood | budget | held | parked | bytes counted | Strings grew MB | RSS grew MB |", "|---|---|---:|---:|---:|---:|---:|"
rows.each { |row| puts format("| %s | %s | %d | %d | %d | %.1f | %.1f |", *row) }
