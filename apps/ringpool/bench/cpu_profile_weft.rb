# frozen_string_literal: true

# `weft serve -C apps/ringpool/bench/cpu_profile_weft.rb`: ringpool as config/weft.rb runs it,
# plus two signal switches in every worker (shard) for apps/ringpool/bench/cpu_profile.rb:
#
#   SIGUSR1  start StackProf (cpu mode, raw stacks); sent again, stop it and write the results
#            to $RINGPOOL_PROFILE_DIR/stackprof-PID.dump (Marshal)
#   SIGUSR2  append the worker's counters (CPU seconds, objects allocated, GC runs minor and
#            major, milliseconds in GC) as a JSON line to $RINGPOOL_PROFILE_DIR/counters-PID.jsonl
#
# The worker resets USR1/USR2 before booting the app (Weft's cluster ignores them in workers):
# these traps are set after that, in after_worker_boot. Send them to the workers, never to the
# master (there they mean phased and hot restart).
main = File.expand_path("../config/weft.rb", __dir__)
instance_eval(File.read(main), main, 1)

after_worker_boot do |_index|
  require "json"
  require "stackprof"
  dir = ENV.fetch("RINGPOOL_PROFILE_DIR")
  interval = Integer(ENV.fetch("RINGPOOL_PROFILE_INTERVAL_US", "500"))
  Signal.trap("USR1") do
    if StackProf.running?
      StackProf.stop
      File.binwrite(File.join(dir, "stackprof-#{Process.pid}.dump.partial"), Marshal.dump(StackProf.results))
      File.rename(File.join(dir, "stackprof-#{Process.pid}.dump.partial"), File.join(dir, "stackprof-#{Process.pid}.dump"))
    else
      StackProf.start(mode: :cpu, raw: true, interval: interval)
    end
  end
  Signal.trap("USR2") do
    counters = { "cpu" => Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID),
                 "objects" => GC.stat(:total_allocated_objects), "gc" => GC.count,
                 "minor_gc" => GC.stat(:minor_gc_count), "major_gc" => GC.stat(:major_gc_count), "gc_ms" => GC.stat(:time) }
    File.write(File.join(dir, "counters-#{Process.pid}.jsonl"), "#{JSON.generate(counters)}\n", mode: "a")
  end
end
