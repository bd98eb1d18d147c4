# frozen_string_literal: true

# The Rails app of bench/postgres/rails_bench.rb with a measuring window of its own, for
# bench/postgres/rails_profile.rb: the same app under any server (loaded in the process that
# serves, Falcon's forked worker included), and over a window that the driver sets by writing
# "FROM TO" (wall-clock epoch seconds) to the file PROFILE_CONTROL a thread of this process records
#
# - the process's CPU time (CLOCK_PROCESS_CPUTIME_ID: this process alone, not a supervisor;
#   and Process.times's user and system parts),
# - GC.stat's counters (objects allocated, minor and major collections, GC time),
# - requests answered (counted by the middleware below),
# - with PROFILE_MODE (cpu, wall or object), a StackProf profile of the window,
# - what set off each major GC (GC.latest_gc_info's major_by, polled every 5 ms),
# - with PROFILE_CALLS=1, every method, C function and block called (a TracePoint: slow, so
#   the window's CPU figures are then not the server's),
# - with PROFILE_SWITCHES=1, fiber switches (a TracePoint on :fiber_switch),
# - RubyVM.stat, live slots and old objects; with PROFILE_SINGLETONS=1 the objects with a
#   singleton class (at the window's end), with PROFILE_HEAP=1 the ActiveRecord adapters alive,
#
# and writes them to PROFILE_OUT (Marshal: the counters, and the profile's raw result).
require "stackprof" if ENV["PROFILE_MODE"]
require_relative "../../test/postgres/apps/rails_app/config/environment"

# Counts the requests answered.
class RequestCounter
  class << self
    attr_accessor :count
  end
  self.count = 0

  def initialize(app)
    @app = app
  end

  def call(env)
    response = @app.call(env)
    RequestCounter.count += 1
    response
  end
end

counters = lambda do
  gc = GC.stat
  times = Process.times
  { cpu: Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID), user: times.utime, system: times.stime,
    requests: RequestCounter.count,
    allocated: gc[:total_allocated_objects], minor: gc[:minor_gc_count], major: gc[:major_gc_count],
    gc_ms: gc[:time] || 0, live: gc[:heap_live_slots], old: gc[:old_objects], pid: Process.pid, vm: RubyVM.stat,
    adapters: (ObjectSpace.each_object(ActiveRecord::ConnectionAdapters::AbstractAdapter).count if ENV["PROFILE_HEAP"]), yjit: (RubyVM::YJIT.runtime_stats if defined?(RubyVM::YJIT) && RubyVM::YJIT.enabled?) }
end

Thread.new do
  control = ENV.fetch("PROFILE_CONTROL")
  File.write("#{control}.pid", Process.pid.to_s) # the process that serves, for strace
  sleep 0.1 until File.size?(control)
  from, to = File.read(control).split.map { |time| Float(time) }
  sleep [from - Time.now.to_f, 0].max
  mode = ENV["PROFILE_MODE"]
  calls = Hash.new(0) if ENV["PROFILE_CALLS"]
  trace = TracePoint.new(:call, :c_call, :b_call) { |tp| calls[[tp.event, tp.defined_class, tp.method_id, tp.path, tp.lineno]] += 1 } if calls
  switches = 0
  switching = TracePoint.new(:fiber_switch) { switches += 1 } if ENV["PROFILE_SWITCHES"]
  majors = Hash.new(0)
  watch = Thread.new do
    seen = GC.count
    loop do
      sleep 0.005
      next if GC.count == seen
      seen = GC.count
      info = GC.latest_gc_info
      majors[info[:major_by]] += 1 if info[:major_by]
    end
  end
  StackProf.start(mode: mode.to_sym, interval: Integer(ENV.fetch("PROFILE_INTERVAL", mode == "object" ? 20 : 500)), raw: true) if mode
  before = counters.call
  trace&.enable
  switching&.enable
  sleep [to - Time.now.to_f, 0].max
  switching&.disable
  trace&.disable
  after = counters.call
  watch.kill
  StackProf.stop if mode
  calls = calls&.to_h { |(event, owner, method, path, line), count| [[event, owner.inspect, method, path, line], count] }
  # Objects (not classes or modules) with a singleton class of their own, by class: YJIT
  # compiles no call on such an object (its stats count them as send_singleton_class).
  singletons = if ENV["PROFILE_SINGLETONS"]
                 ObjectSpace.each_object(Class).select(&:singleton_class?).map(&:attached_object)
                            .reject { |object| object.is_a?(Module) }.group_by(&:class).transform_values(&:size)
                            .transform_keys(&:inspect)
               end
  data = { singletons: singletons, before: before, after: after, profile: (StackProf.results if mode), calls: calls, majors: majors,
           switches: (switches if switching) }
  File.binwrite(ENV.fetch("PROFILE_OUT"), Marshal.dump(data))
end

use RequestCounter
run Rails.application
