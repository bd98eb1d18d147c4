# frozen_string_literal: true

# How late a request ends after the caller's deadline: a server that accepts and never answers,
# and `Weft.deadline(0.2)` around a request made in a task spawned under it (inside a reactor)
# and around a request in a plain thread (no reactor: Timeout enforces the deadline). Prints
# the median and the worst of RUNS tries, in milliseconds after the deadline.
#
#   bundle exec ruby bench/http_client/deadline.rb [RUNS] [LIB]
#
# LIB: the lib/ directory of the client to measure (see download.rb).
require_relative "support"

RUNS = Integer(ARGV[0] || 20)
$LOAD_PATH.unshift(File.expand_path(ARGV[1])) if ARGV[1]
verbose, $VERBOSE = $VERBOSE, nil # Bundler loaded this checkout's Weft::VERSION already
require "weft"
require "weft/http"
$VERBOSE = verbose

DEADLINE = 0.2
listener = TCPServer.new("127.0.0.1", 0)
Thread.new do
  loop do
    Thread.new(listener.accept) do |socket|
      socket.readpartial(65_536)
      sleep
    rescue IOError, SystemCallError
      nil
    end
  end
end
client = Weft::HTTP::Client.new("http://127.0.0.1:#{listener.addr[1]}", proxy: nil)

# @return [Float] milliseconds from the deadline to the request's end
def lateness
  started = Bench.now
  begin
    yield
    raise "the request ended without an error"
  rescue Weft::DeadlineExceeded
    nil
  end
  (Bench.now - started - DEADLINE) * 1000
end

late = { "reactor, spawned task" => [], "plain thread" => [] }
RUNS.times do
  Weft.run do
    late["reactor, spawned task"] << lateness { Weft.deadline(DEADLINE) { Weft.spawn { client.get("/") }.wait } }
  end
  late["plain thread"] << lateness { Weft.deadline(DEADLINE) { client.get("/") } }
end
puts "Weft.deadline(#{DEADLINE}) around a request to a server that never answers, #{RUNS} runs (#{Bench.versions})"
late.each do |where, ms|
  ms.sort!
  puts format("%-22s ms after the deadline: median %.1f, worst %.1f", where, ms[ms.size / 2], ms.max)
end
