# frozen_string_literal: true

# The app behind bench/server/profile.rb: hello world at /, and the profiler's controls under
# /__profile/ (they run in the server process, so they can read its counters and objects).
require "json"

# The server's CPU time, and what the GC did: objects allocated, collections run (minor and
# major) and the time they took (GC.stat(:time), milliseconds, Ruby 3.1+).
counters = lambda {
  gc = GC.stat
  { cpu: Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID), allocations: gc[:total_allocated_objects],
    minor_gcs: gc[:minor_gc_count], major_gcs: gc[:major_gc_count], gc_ms: gc[:time] }
}

controls = {
  "/__profile/start" => lambda {
    GC.start
    counters.call
  },
  "/__profile/counters" => counters,
  "/__profile/calls/start" => lambda {
    $profile_calls = Hash.new(0)
    $profile_methods = Hash.new(0)
    $profile_trace = TracePoint.new(:call, :c_call, :b_call) do |point|
      $profile_calls[point.event] += 1
      $profile_methods["#{point.defined_class}##{point.method_id}"] += 1 unless point.event == :b_call
    end
    $profile_trace.enable
    {}
  },
  "/__profile/calls/stop" => lambda {
    $profile_trace.disable
    { events: $profile_calls, methods: $profile_methods.sort_by { |_, count| -count }.first(40) }
  },
  # Where objects are allocated: ObjectSpace's allocation tracing, with the GC off until stop
  # so that every object allocated meanwhile is still there to be counted. An object made in C
  # is charged to the Ruby line that called into C.
  "/__profile/allocations/start" => lambda {
    require "objspace"
    GC.start
    GC.disable
    $profile_generation = GC.count
    ObjectSpace.trace_object_allocations_start
    {}
  },
  "/__profile/allocations/stop" => lambda {
    ObjectSpace.trace_object_allocations_stop
    sites = Hash.new(0)
    ObjectSpace.each_object do |object|
      next unless ObjectSpace.allocation_generation(object) == $profile_generation
      file = ObjectSpace.allocation_sourcefile(object) or next
      klass = Kernel.instance_method(:class).bind_call(object)
      sites["#{klass} #{file.sub(%r{\A.*/(?=(lib|gems|bench)/)}, '')}:#{ObjectSpace.allocation_sourceline(object)}"] += 1
    end
    ObjectSpace.trace_object_allocations_clear
    GC.enable
    { sites: sites.sort_by { |_, count| -count }.first(20) }
  },
  "/__profile/stackprof/start" => lambda {
    require "stackprof" # here: a checkout profiled for its counters alone may not bundle it
    StackProf.start(mode: :cpu, interval: 100)
    {}
  },
  "/__profile/stackprof/stop" => lambda {
    StackProf.stop
    results = StackProf.results
    total = results[:samples].to_f
    frames = results[:frames].values.sort_by { |frame| -frame[:samples] }.first(25)
    { frames: frames.map { |frame| { name: frame[:name], percent: 100 * frame[:samples] / total } } }
  }
}.freeze

run lambda { |env|
  path = env["PATH_INFO"]
  if path == "/"
    # A new response each time, as an app builds one: these three objects are the app's.
    [200, { "content-type" => "text/plain" }, ["Hello World"]]
  else
    control = controls.fetch(path)
    [200, { "content-type" => "application/json" }, [JSON.generate(control.call)]]
  end
}
