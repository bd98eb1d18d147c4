# frozen_string_literal: true

# bench/core/pipe_pingpong.rb: the cost of a read that waits. Two tasks pass a byte back and
# forth over two pipes, so every hop is a read that finds nothing and waits in
# Scheduler#io_wait; reported as CPU time per round trip (two waits), the best of three runs.
# Compare two checkouts by running each from its own directory, alternated:
#
#   ruby bench/core/pipe_pingpong.rb [LABEL]     # Ruby 3.1
#   /work/wt/r33.sh ruby bench/core/pipe_pingpong.rb [LABEL]
#
# Loads the lib/ of the current directory's checkout ahead of the bundle's.
require_relative "../support/bundle"
$LOAD_PATH.unshift(File.expand_path("lib", Dir.pwd))
require "weft"

ROUNDS = Integer(ENV.fetch("ROUNDS", "50000"))

# @return [Float] CPU seconds the process spent on `rounds` round trips
def round_trips(rounds)
  Weft.run do
    there_reader, there_writer = IO.pipe
    back_reader, back_writer = IO.pipe
    echo = Weft.spawn { rounds.times { there_reader.read(1); back_writer.write("x") } }
    started = Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID)
    rounds.times { there_writer.write("x"); back_reader.read(1) }
    echo.wait
    Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID) - started
  end
end

round_trips(2_000) # warm-up (YJIT)
best = Array.new(3) { round_trips(ROUNDS) }.min
printf("%s: ruby %s%s, %d round trips: %.2f us of CPU per round trip\n", ARGV[0] || Dir.pwd, RUBY_VERSION,
  defined?(RubyVM::YJIT) && RubyVM::YJIT.enabled? ? " + YJIT" : "", ROUNDS, best / ROUNDS * 1e6)
