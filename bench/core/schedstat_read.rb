# frozen_string_literal: true

# What a reading of a thread's scheduler statistics (Linux's /proc/.../schedstat) costs, the ways
# Weft reads them and the plain ways it does not: CPU time per call (this thread's CPU clock,
# steadier than the wall clock on a shared machine) and objects allocated per call. The ways
# alternate, ROUNDS rounds of N calls each; the median round is printed beside all of them.
#
#   bundle exec ruby bench/core/schedstat_read.rb                 (Ruby 3.1)
#   /work/wt/r33.sh bundle exec ruby bench/core/schedstat_read.rb (Ruby 3.3 + YJIT)
#       N=20000 calls a round, ROUNDS=9
#
# Rows: the file read whole (File.read: an fstat, reads until the end) and with a length (one
# read); a file kept open, read after a seek or with one pread; Weft::ThreadStatistics read once
# (the calling thread) and kept open; Weft::Postgres::CoreWait.thread_wait (the pool's reading);
# Weft::Server::StallDetector's ticker pulse (#beat).
require_relative "../support/bundle"
require_relative "../../lib/weft"
require_relative "../../lib/weft/server"
require_relative "../../lib/weft/postgres"

N = Integer(ENV.fetch("N", "20000"))
ROUNDS = Integer(ENV.fetch("ROUNDS", "9"))
CALLING_THREAD = Weft::ThreadStatistics::CALLING_THREAD

abort "no per-thread scheduler statistics here (#{CALLING_THREAD})" unless File.readable?(CALLING_THREAD)

def cpu_now
  Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID)
end

kept = File.open(CALLING_THREAD)
statistics = Weft::ThreadStatistics.new(Thread.current).keep_open
detector = Weft::Server::StallDetector.new(1.0)
# The reader StallDetector#start keeps for the reactor thread (this one), without its ticker
# and watchdog.
detector.instance_variable_set(:@reactor_statistics, statistics)

WAYS = {
  "File.read (whole)" => -> { File.read(CALLING_THREAD) },
  "File.read (64 bytes)" => -> { File.read(CALLING_THREAD, 64) },
  "kept open: seek + sysread" => lambda {
    kept.sysseek(0)
    kept.sysread(64)
  },
  "kept open: pread" => -> { kept.pread(64, 0) },
  "ThreadStatistics.calling_thread" => -> { Weft::ThreadStatistics.calling_thread },
  "ThreadStatistics#read (kept open)" => -> { statistics.read },
  "CoreWait.thread_wait" => -> { Weft::Postgres::CoreWait.thread_wait },
  "StallDetector#beat" => -> { detector.send(:beat) }
}.freeze

cpu = Hash.new { |hash, name| hash[name] = [] }
objects = {}
ROUNDS.times do
  WAYS.each do |name, way|
    GC.start
    allocated = GC.stat(:total_allocated_objects)
    started = cpu_now
    N.times { way.call }
    cpu[name] << (cpu_now - started) / N * 1e6
    objects[name] = (GC.stat(:total_allocated_objects) - allocated).fdiv(N)
  end
end

puts "#{RUBY_DESCRIPTION}; #{N} calls x #{ROUNDS} rounds; load average #{File.read('/proc/loadavg').split.first(3).join(' ')}"
puts "| way | CPU µs a call (median) | rounds | objects a call |"
puts "|---|---:|---|---:|"
cpu.each do |name, rounds|
  puts format("| %s | %.2f | %s | %.1f |", name, rounds.sort[rounds.size / 2], rounds.map { |value| format("%.1f", value) }.join(" "),
              objects[name])
end
