# frozen_string_literal: true

# The load generator for the echo rows: `ruby echo_client.rb PORT CONNECTIONS ROUNDS`.
# It is the same program whichever reactor serves, and it runs in its own process (its own
# core on a 2-core machine), plain blocking Ruby with no scheduler: every round writes a line
# on each connection, then reads every echo.
require "socket"

port, connections, rounds = ARGV.map { |arg| Integer(arg) }
limit = connections + 100
Process.setrlimit(:NOFILE, limit) if Process.getrlimit(:NOFILE)[0] < limit

sockets = Array.new(connections) { TCPSocket.new("127.0.0.1", port) }
message = "ping\n"
started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
rounds.times do
  sockets.each { |socket| socket.write(message) }
  sockets.each { |socket| socket.gets == message or abort "bad echo" }
end
elapsed = Process.clock_gettime(Process::CLOCK_MONOTONIC) - started
puts "#{connections * rounds} #{elapsed}"
$stdout.flush
sockets.each(&:close)
