# frozen_string_literal: true

# The app behind bench/server/profile.rb: hello world at /, and the profiler's controls under
# /__profile/ (they run in the server process, so they can read its counters).
require "json"

controls = {
  "/__profile/start" => lambda {
    GC.start
    { cpu: Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID), allocations: GC.stat(:total_allocated_objects) }
  },
  "/__profile/counters" => lambda {
    { cpu: Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID), allocations: GC.stat(:total_allocated_objects) }
  },
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
