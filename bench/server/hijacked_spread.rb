# frozen_string_literal: true

# Where new connections go when one worker of `weft serve -w 2` holds many hijacked ones
# (docs/server.md, "Hijacked connections"):
#
#   ruby bench/server/hijacked_spread.rb [CHECKOUT] [HIJACKED] [NEW]   (default: this one, 1000, 64)
#
# Starts CHECKOUT's exe/weft (its bundle; under Ruby 3.3 the BUNDLE_GEMFILE of the same name in
# it) on this checkout's test/server/fixtures/hijack.ru, stops one worker (SIGSTOP) while
# HIJACKED WebSockets (/ws, full hijacks) open on the other, continues it, waits 1.2 s (the
# other then waits for it again: AcceptSpread::RETRY), opens NEW keep-alive connections at
# once (GET /, which answers the pid) and counts them per worker. Needs HIJACKED + NEW
# descriptors twice over (client and server) below the open-files limit.
require "socket"
require "net/http"
require "json"

checkout = File.expand_path(ARGV[0] || Dir.pwd)
hijacked = Integer(ARGV[1] || 1000)
fresh_count = Integer(ARGV[2] || 64)
app = File.expand_path("../../test/server/fixtures/hijack.ru", __dir__)
port = 20_000 + rand(5000)
env = ENV["BUNDLE_GEMFILE"] ? { "BUNDLE_GEMFILE" => File.join(checkout, File.basename(ENV["BUNDLE_GEMFILE"])) } : {}
pid = Process.spawn(env, "bundle", "exec", "ruby", "-Ilib", "exe/weft", "serve", app, "-p", port.to_s, "-o", "127.0.0.1", "-w", "2",
                    "--stats-path", "/stats", "-q", chdir: checkout, out: File::NULL, err: File::NULL, pgroup: true)
get = -> { Net::HTTP.start("127.0.0.1", port) { |http| http.get("/", "Connection" => "close").body.to_i } }
begin
  deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 30
  booted = -> { Process.clock_gettime(Process::CLOCK_MONOTONIC) < deadline or abort("no two workers in 30 s") }
  sleep 0.2 while booted.call && !(begin get.call; rescue SystemCallError, IOError; nil; end)
  pids = nil
  sleep 0.2 while booted.call && (pids = Array.new(40) { get.call }.uniq).size != 2
  light, heavy = pids
  Process.kill("STOP", light)
  sockets = Array.new(hijacked) do
    socket = TCPSocket.new("127.0.0.1", port)
    socket.write("GET /ws HTTP/1.1\r\nHost: x\r\n\r\n")
    head = +""
    head << socket.readpartial(1) until head.end_with?("\r\n\r\n")
    raise "answered by #{socket.gets}" unless socket.gets.to_i == heavy
    socket
  end
  Process.kill("CONT", light)
  sleep 1.2
  fresh = Array.new(fresh_count) { TCPSocket.new("127.0.0.1", port) }
  fresh.each { |socket| socket.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n") }
  got = fresh.map do |socket|
    head = +""
    head << socket.readpartial(1) until head.end_with?("\r\n\r\n")
    socket.read(head[/content-length: (\d+)/i, 1].to_i).to_i
  end
  stats = JSON.parse(Net::HTTP.get(URI("http://127.0.0.1:#{port}/stats")))["workers"]
  hijacked_counts = stats.to_h { |worker| [worker["pid"], worker["connections_hijacked"]] }
  puts format("%s, Ruby %s: %d WebSockets on one worker; of %d new connections opened at once: %d to it, %d to its sibling " \
              "(connections_hijacked in /stats: %s)", File.basename(checkout), RUBY_VERSION, hijacked, fresh_count, got.count(heavy),
              got.count(light), hijacked_counts[heavy].inspect)
ensure
  (sockets || []).each(&:close)
  (fresh || []).each(&:close)
  Process.kill("TERM", -pid) rescue nil
  Process.wait(pid) rescue nil
end
