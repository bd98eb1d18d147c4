# frozen_string_literal: true

# What a worker's first GC costs right after the fork, with and without a full GC in the parent
# just before it (Weft::Server::Cluster#settle_heap):
#
#   bundle exec ruby bench/server/fork_gc.rb [FORKS]    (default 5 forks of each kind)
#
# The parent loads what `weft serve -C apps/ringpool/config/weft.rb` loads in its master (Weft,
# its server, Rack and the ringpool app), as a master does before it forks its workers. Each
# child then runs one minor GC and reports the CPU it took (its own clock, so page copies made
# by the kernel count), then a major one. "as loaded" forks from the heap the loading left, with
# a lazy sweep pending (GC.latest_gc_info[:state] says :sweeping); "after GC.start" runs a full
# GC in the parent first, as the cluster does (before it grows the heap: Weft::Server::ForkHeap).
$LOAD_PATH.unshift(File.expand_path("../../lib", __dir__), File.expand_path("../../apps/ringpool/lib", __dir__))
require "rack"
require "weft"
require "weft/server"
require "weft/server/cluster"
require "ringpool"

FORKS = Integer(ARGV.fetch(0, "5"))

def cpu
  Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID)
end

# @return [Array<(Float, Float)>] per child: its first (minor) GC's CPU seconds, then a major one's
def fork_and_measure
  Array.new(FORKS) do
    reader, writer = IO.pipe
    pid = fork do
      reader.close
      started = cpu
      GC.start(full_mark: false)
      minor = cpu - started
      started = cpu
      GC.start
      writer.write("#{minor} #{cpu - started}")
      exit!(0)
    end
    writer.close
    result = reader.read.split.map(&:to_f)
    reader.close
    Process.wait(pid)
    result
  end
end

def report(label, runs)
  first = runs.map { |minor, _| (minor * 1000).round(1) }.sort
  major = runs.map { |_, full| (full * 1000).round(1) }.sort
  puts format("%-16s first GC in the child: %s ms CPU (median %.1f); a major GC after it: median %.1f ms",
              label, first.join(" / "), first[first.size / 2], major[major.size / 2])
end

puts "Ruby #{RUBY_VERSION}, #{GC.stat(:heap_live_slots)} live slots, GC state #{GC.latest_gc_info[:state]}, " \
     "load average #{File.read('/proc/loadavg').split.first(3).join(' ')}"
report("as loaded", fork_and_measure)
parent = cpu
GC.start
puts format("GC.start in the parent: %.1f ms CPU", (cpu - parent) * 1000)
report("after GC.start", fork_and_measure)
