# frozen_string_literal: true

# What a look at the hijacked sockets costs (Weft::Server::HijackedSockets#sweep, which the
# server runs once every SWEEP_INTERVAL while the app holds taken-over connections):
#
#   bundle exec ruby bench/server/hijacked_sweep.rb [SOCKETS]    (default 5,000)
#
# SOCKETS unix socket pairs, one end of each registered as if hijacked and none closed (the
# steady state: every socket is looked at, none taken off); prints the CPU time of one sweep
# (median of 7 rounds of 20) in all and per socket. Needs 2 x SOCKETS descriptors.
$LOAD_PATH.unshift(File.expand_path("../../lib", __dir__))
require "socket"
require "weft/server"

count = Integer(ARGV[0] || 5000)
hijacked = Weft::Server::HijackedSockets.new
pairs = Array.new(count) { UNIXSocket.pair }
pairs.each { |socket, _| hijacked.add(socket) }
GC.start
rounds = Array.new(7) do
  started = Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID)
  20.times { hijacked.sweep }
  (Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID) - started) / 20
end
median = rounds.sort[rounds.size / 2]
yjit = defined?(RubyVM::YJIT) && RubyVM::YJIT.enabled? ? " + YJIT" : ""
puts format("Ruby %s%s: %d sockets, one sweep %.3f ms of CPU, %.0f ns per socket", RUBY_VERSION, yjit, count,
            median * 1000, median / count * 1e9)
