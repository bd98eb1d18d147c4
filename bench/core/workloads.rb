# frozen_string_literal: true

# One workload, one implementation, one process: `ruby workloads.rb IMPL WORKLOAD [N]` prints
# `ops seconds` on stdout. bench/core runs it for Weft and async side by side.
#
# Each implementation is driven through the same small adapter, so the workload code is shared
# and only the reactor underneath differs.

require "socket"

IMPL, WORKLOAD, SIZE = ARGV[0], ARGV[1], Integer(ARGV[2] || 0)

Adapter = Struct.new(:run, :spawn, :wait)

ADAPTER =
  case IMPL
  when "weft"
    require "weft"
    Adapter.new(->(&b) { Weft.run(&b) }, ->(&b) { Weft.spawn(&b) }, ->(task) { task.wait })
  when "async"
    require "async"
    # async 2.24's io_read/io_write hooks call IO#timeout, which exists from Ruby 3.2 on; on 3.1
    # every socket read under async raises NoMethodError without this (answering "no timeout").
    IO.define_method(:timeout) { nil } unless IO.method_defined?(:timeout)
    Adapter.new(->(&b) { Sync(&b) }, ->(&b) { Async::Task.current.async(&b) }, ->(task) { task.wait })
  else
    abort "unknown implementation #{IMPL}"
  end

def now = Process.clock_gettime(Process::CLOCK_MONOTONIC)

def report(ops, seconds)
  puts "#{ops} #{seconds}"
end

def run(&block) = ADAPTER.run.call(&block)
def spawn(&block) = ADAPTER.spawn.call(&block)
def wait(task) = ADAPTER.wait.call(task)

case WORKLOAD
when "spawn"
  # Start SIZE tasks that return at once, then wait for each.
  run do
    started = now
    tasks = Array.new(SIZE) { spawn { 1 } }
    tasks.each { |task| wait(task) }
    report(SIZE, now - started)
  end
when "pingpong"
  # Two tasks hand a token back and forth SIZE times through Thread::Queue, which both reactors
  # serve through the scheduler's block/unblock hooks: one switch per hand-off.
  run do
    ping = Thread::Queue.new
    pong = Thread::Queue.new
    started = now
    player = spawn { SIZE.times { pong << ping.pop } }
    SIZE.times { |i| ping << i; pong.pop }
    wait(player)
    report(SIZE * 2, now - started)
  end
when "timers"
  # SIZE tasks each sleep a different short time (0-50 ms); measures arming, ordering and firing
  # SIZE timers. Reported as timers per second of wall time beyond the longest sleep.
  run do
    random = Random.new(1)
    delays = Array.new(SIZE) { random.rand(0.05) }
    started = now
    tasks = delays.map { |delay| spawn { sleep delay } }
    tasks.each { |task| wait(task) }
    elapsed = now - started
    report(SIZE, elapsed)
  end
when "echo"
  # An echo server on the reactor; the load comes from a separate client process (the same
  # client for both implementations) holding SIZE connections and doing ROUNDS round trips on
  # each. Reported as round trips per second, measured by the client.
  rounds = Integer(ENV.fetch("ROUNDS", "20"))
  server = TCPServer.new("127.0.0.1", 0)
  server.listen(4096)
  client = IO.popen([RbConfig.ruby, File.join(__dir__, "echo_client.rb"), server.addr[1].to_s, SIZE.to_s, rounds.to_s], "r")
  run do
    acceptor = spawn do
      loop do
        socket = server.accept
        spawn do
          while (line = socket.gets)
            socket.write(line)
          end
        rescue Errno::ECONNRESET
          nil
        ensure
          socket.close
        end
      end
    end
    line = client.gets # "round_trips seconds" once the client is done
    IMPL == "weft" ? acceptor.cancel : acceptor.stop
    puts line
  end
  client.close
else
  abort "unknown workload #{WORKLOAD}"
end
