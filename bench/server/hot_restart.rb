# frozen_string_literal: true

# Where a hot restart's (USR2) time goes: a two-worker `weft serve` of the cluster tests' app,
# 30 keep-alive clients POSTing to a 20 ms endpoint through it (as test/server/cluster_test.rb
# does), then USR2; from the master's log and its child processes (/proc, Linux):
#
#   new master up     exec -> the new master's "weft master" line (Ruby, Weft and the CLI
#                     loading, the listeners inherited, its signals trapped)
#   workers booted    -> both new workers reported booting (fork, the app loaded)
#   previous exited   -> the previous workers, stopped then, have exited (their drain)
#
#   bundle exec ruby bench/server/hot_restart.rb [RUNS]          (Ruby 3.1)
#   /work/wt/r33.sh bundle exec ruby bench/server/hot_restart.rb  (3.3 + YJIT, via RUBY_YJIT_ENABLE)
#
# Prints one line per run with the load average when USR2 was sent.

require "socket"
require "tmpdir"
require "time"
require_relative "../support/ports"
require_relative "../support/processes"

ROOT = File.expand_path("../..", __dir__)
APP = File.join(ROOT, "test/server/fixtures/pid.ru")
CLIENTS = 30

def now = Process.clock_gettime(Process::CLOCK_MONOTONIC)

# One keep-alive client: POSTs in a loop, reconnecting after `connection: close`.
def client(port, stop)
  Thread.new do
    socket = nil
    until stop[0]
      begin
        socket ||= TCPSocket.new("127.0.0.1", port)
        socket.write("POST /sleep?s=0.02 HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello")
        head = +""
        head << socket.readpartial(4096) until head.include?("\r\n\r\n")
        length = head[/content-length: (\d+)/i, 1].to_i
        body = head.split("\r\n\r\n", 2)[1]
        body << socket.readpartial(4096) while body.bytesize < length
        if head.match?(/^connection: close/i)
          socket.close
          socket = nil
        end
      rescue SystemCallError, IOError
        socket&.close
        socket = nil
      end
    end
    socket&.close
  end
end

def run_once
  Dir.mktmpdir do |dir|
    log = File.join(dir, "weft.log")
    port = Bench.free_port
    master = Process.spawn(RbConfig.ruby, File.join(ROOT, "exe/weft"), "serve", APP, "-p", port.to_s, "-o", "127.0.0.1",
                           "-w", "2", chdir: ROOT, out: log, err: log, pgroup: true)
    begin
      previous = Bench::Processes.wait_until(30, "two workers") { (pids = Bench::Processes.children(master)).size == 2 && File.read(log).scan("booted").size == 2 && pids }
      stop = [false]
      clients = Array.new(CLIENTS) { client(port, stop) }
      sleep 1 # the clients are under way
      load = File.read("/proc/loadavg").split.first
      sent = now
      Process.kill("USR2", master)
      exited = Bench::Processes.wait_until(60, "the previous workers gone") { (pids = Bench::Processes.children(master)).size == 2 && (pids & previous).empty? && now - sent }
      stop[0] = true
      clients.each(&:join)
      lines = File.readlines(log)
      stamp = ->(pattern) { Time.parse(lines.grep(pattern).last[/\[(\S+)/, 1]) }
      exec_at = stamp.(/re-executing/)
      up = stamp.(/weft master/) - exec_at
      booted = lines.grep(/booted/).last(2).map { |line| Time.parse(line[/\[(\S+)/, 1]) }.max - exec_at
      printf("load %s: new master up %.2f s, workers booted %.2f s, previous workers exited %.2f s after USR2\n",
             load, up, booted, exited)
    ensure
      Process.kill("TERM", master)
      Process.wait(master)
    end
  end
end

puts RUBY_DESCRIPTION
Integer(ARGV[0] || 3).times { run_once }
