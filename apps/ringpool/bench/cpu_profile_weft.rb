# frozen_string_literal: true

# `weft serve -C apps/ringpool/bench/cpu_profile_weft.rb`: ringpool as config/weft.rb runs it,
# plus signal switches in every worker (shard) for apps/ringpool/bench/cpu_profile.rb:
#
#   SIGUSR1  with RINGPOOL_PROFILE_MODE=cpu (the default): start StackProf (cpu mode, raw
#            stacks); sent again, stop it and write the results to
#            $RINGPOOL_PROFILE_DIR/stackprof-PID.dump (Marshal).
#            With RINGPOOL_PROFILE_MODE=allocations: a full GC, then the GC off and ObjectSpace's
#            allocation tracing on; sent again, count the objects allocated meanwhile by class
#            and site (an object made in C is charged to the Ruby line that called into C),
#            turn the GC back on and write them to $RINGPOOL_PROFILE_DIR/allocations-PID.json
#   SIGUSR2  append the worker's counters (CPU seconds, objects allocated, GC runs minor and
#            major, milliseconds in GC, the heap's live, free and old slots) as a JSON line to
#            $RINGPOOL_PROFILE_DIR/counters-PID.jsonl
#
# The worker resets USR1/USR2 before booting the app (Weft's cluster ignores them in workers):
# these traps are set after that, in after_worker_boot. Send them to the workers, never to the
# master (there they mean phased and hot restart).
main = File.expand_path("../config/weft.rb", __dir__)
instance_eval(File.read(main), main, 1)

after_worker_boot do |_index|
  require "json"
  require "stackprof"
  require "objspace"
  dir = ENV.fetch("RINGPOOL_PROFILE_DIR")
  interval = Integer(ENV.fetch("RINGPOOL_PROFILE_INTERVAL_US", "500"))
  mode = ENV.fetch("RINGPOOL_PROFILE_MODE", "cpu")
  write = lambda do |name, data|
    File.binwrite(File.join(dir, "#{name}.partial"), data)
    File.rename(File.join(dir, "#{name}.partial"), File.join(dir, name))
  end
  tracing = nil
  Signal.trap("USR1") do
    if mode == "allocations"
      if tracing
        ObjectSpace.trace_object_allocations_stop
        sites = Hash.new(0)
        ObjectSpace.each_object do |object|
          next unless ObjectSpace.allocation_generation(object) == tracing
          file = ObjectSpace.allocation_sourcefile(object) or next
          klass = Kernel.instance_method(:class).bind_call(object)
          sites["#{klass} #{file.sub(%r{\A.*/(?=(lib|gems|bench|apps)/)}, '')}:#{ObjectSpace.allocation_sourceline(object)}"] += 1
        end
        ObjectSpace.trace_object_allocations_clear
        tracing = nil
        GC.enable
        write.call("allocations-#{Process.pid}.json", JSON.generate(sites))
      else
        GC.start
        GC.disable
        tracing = GC.count
        ObjectSpace.trace_object_allocations_start
      end
    elsif StackProf.running?
      StackProf.stop
      write.call("stackprof-#{Process.pid}.dump", Marshal.dump(StackProf.results))
    else
      StackProf.start(mode: :cpu, raw: true, interval: interval)
    end
  end
  Signal.trap("USR2") do
    stat = GC.stat
    slots = stat[:heap_available_slots]
    counters = { "cpu" => Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID),
                 "objects" => stat[:total_allocated_objects], "gc" => stat[:count],
                 "minor_gc" => stat[:minor_gc_count], "major_gc" => stat[:major_gc_count], "gc_ms" => stat[:time],
                 "heap_slots" => slots, "heap_live" => stat[:heap_live_slots], "heap_free" => stat[:heap_free_slots],
                 "old_objects" => stat[:old_objects], "major_by" => GC.latest_gc_info(:major_by).to_s }
    if GC.respond_to?(:stat_heap) # Ruby 3.2+: per size pool, slot size => [slots, live]
      counters["pools"] = GC.stat_heap.values.to_h do |heap|
        [heap[:slot_size], [heap[:heap_eden_slots], heap[:total_allocated_objects] - heap[:total_freed_objects]]]
      end
    end
    File.write(File.join(dir, "counters-#{Process.pid}.jsonl"), "#{JSON.generate(counters)}\n", mode: "a")
  end
end
