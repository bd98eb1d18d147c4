# frozen_string_literal: true

# The fan-out app of bench/resilience/fault, run under `weft serve -w 0`: each request asks the
# four shards at once with Weft.scatter under one deadline, each shard call guarded by the
# variant's breaker, and a shard that fails, is late or is refused gets a marker instead.
#
#   GET /        the fan-out; answers one letter per shard:
#                  A answered     the shard answered within the deadline
#                  F failed       the call ran and failed (the deadline passed in it, or an error)
#                  R refused      the breaker refused the call: no request was sent
#                  C cancelled    the scatter cancelled the call before the call itself saw the
#                                 deadline, so the breaker recorded no outcome for it
#                  N not run      the deadline passed before the call's task even started (the
#                                 process was starved of CPU for the whole deadline)
#   POST /reset  replaces every breaker with a new one: the driver calls it at the end of the
#                warm-up, so that a breaker the cold start tripped does not carry over
#   GET /report  JSON: every fan-out (wall-clock start, seconds, letters, GC runs and CPU wait
#                during it), every change of a breaker's state, GC totals, for the driver to
#                bin by second
#
# Environment (the driver sets it):
#   FAULT_VARIANT   weft      Weft::CircuitBreaker per shard
#                   semian    Semian's circuit breaker per shard (bulkhead: false)
#                   deadline  no breaker: the deadline alone
#   FAULT_SHARDS    the shards' unix socket paths, comma-separated
#   FAULT_DEADLINE  seconds (0.05)
#   FAULT_BREAKER   JSON of the breaker settings (see bench/resilience/fault.rb)
require "json"
require_relative "../../lib/weft/http"
require_relative "../../lib/weft/resilience"

VARIANT = ENV.fetch("FAULT_VARIANT")
DEADLINE = Float(ENV.fetch("FAULT_DEADLINE", "0.05"))
BREAKER = JSON.parse(ENV.fetch("FAULT_BREAKER", "{}"), symbolize_names: true)

# The wall clock, which the driver, the shards and this app share: the fault window and the
# load's timeline are set in it. (A method defined in a rackup file would belong to the builder.)
WALL_CLOCK = -> { Process.clock_gettime(Process::CLOCK_REALTIME) }

# Seconds the reactor's thread has spent runnable but waiting for a CPU (Linux schedstat): how
# much of a slow fan-out was the machine's doing rather than the app's.
RUN_DELAY = -> { File.read("/proc/thread-self/schedstat").split[1].to_i / 1e9 }

# Every fan-out ([wall-clock start, seconds, letters, garbage collections that ran during it,
# seconds the thread waited for a CPU during it, the hey process that sent it]) and every
# change of a breaker's state ([wall clock, shard, state, generation]), kept in memory for
# /report: a run is half a minute of 100 requests a second. One process (-w 0), so one copy.
FANOUTS = []
CHANGES = []

# How many times /reset has replaced the breakers: the changes of a replaced breaker (a call
# under way when it was replaced can still move it) are told apart by it.
module Generation
  @current = 0

  class << self
    attr_reader :current

    def next!
      @current += 1
    end
  end
end

# Weft's breaker: opens on a failure rate or a slow-call rate over a sliding window, stays open,
# then ramps 5% -> 25% -> 50% -> all.
class WeftGuard
  OUTCOME = ->(error) { error.is_a?(Weft::Rejected) ? "R" : "F" }

  def initialize(name)
    generation = Generation.current
    @breaker = Weft::CircuitBreaker.new(name, **BREAKER)
    @breaker.on_change { |breaker, _from, to| CHANGES << [WALL_CLOCK.call, breaker.name, to.to_s, generation] }
  end

  def call
    @breaker.call(fallback: OUTCOME) do
      yield
      "A"
    end
  end
end

# Semian's breaker: opens after error_threshold errors within error_threshold_timeout, stays
# open error_timeout seconds after the last error, then half-open: every call runs, the first
# error opens it again and success_threshold successes close it.
class SemianGuard
  # What Semian hands a half-open call's timeout to (`half_open_resource_timeout`): a
  # resource that knows how to shorten its own timeout. Here, a tighter Weft deadline.
  module ResourceTimeout
    def self.with_resource_timeout(seconds, &block)
      Weft.deadline(seconds, &block)
    end
  end

  # Semian's breaker => the generation it belongs to (Semian tells its changes to subscribers
  # of the whole library, with the breaker).
  GENERATIONS = {}.compare_by_identity

  def self.install
    require "semian"
    Semian.logger = Logger.new(File::NULL)
    Semian.subscribe do |event, breaker, _scope, _adapter, payload|
      generation = GENERATIONS[breaker]
      # A new breaker announces "closed" while it is built, before it has a generation.
      CHANGES << [WALL_CLOCK.call, breaker.name.to_s, payload[:state].to_s, generation] if event == :state_change && generation
    end
  end

  def initialize(name)
    # Registering a name again replaces the resource, breaker and all.
    @resource = Semian.register(name.to_sym, bulkhead: false, exceptions: [StandardError], **BREAKER)
    GENERATIONS[@resource.circuit_breaker] = Generation.current
  end

  def call
    @resource.acquire(resource: ResourceTimeout) { yield }
    "A"
  rescue Semian::OpenCircuitError
    "R"
  rescue StandardError
    "F"
  end
end

# The baseline: no breaker, every call runs into the deadline.
class NoGuard
  def initialize(_name); end

  def call
    yield
    "A"
  rescue StandardError
    "F"
  end
end

# One upstream shard: a keep-alive client and the variant's guard.
class Shard
  def initialize(index, socket, guard)
    @name = "shard-#{index}"
    @client = Weft::HTTP::Client.new("unix://#{socket}")
    @guard_class = guard
    reset
  end

  # @return [String] the outcome's letter
  def call
    @guard.call { @client.get("/").body }
  end

  # Starts over with a new breaker (calls under way finish with the old one).
  def reset
    @guard = @guard_class.new(@name)
  end
end

GUARD = { "weft" => WeftGuard, "semian" => SemianGuard, "deadline" => NoGuard }.fetch(VARIANT) do
  raise ArgumentError, "FAULT_VARIANT must be weft, semian or deadline (got #{VARIANT.inspect})"
end
GUARD.install if GUARD.respond_to?(:install)
SHARDS = ENV.fetch("FAULT_SHARDS").split(",").each_with_index.map { |socket, index| Shard.new(index, socket, GUARD) }
INDEXES = SHARDS.each_index.to_a.freeze

run lambda { |env|
  case env["PATH_INFO"]
  when "/"
    wall = WALL_CLOCK.call
    gc_runs = GC.count
    waited = RUN_DELAY.call
    started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    entered = Array.new(SHARDS.size, false)
    late = ->(index, _error) { entered[index] ? "C" : "N" }
    letters = Weft.scatter(INDEXES, deadline: DEADLINE, fallback: late) do |index|
      entered[index] = true
      SHARDS[index].call
    end.join
    FANOUTS << [wall, Process.clock_gettime(Process::CLOCK_MONOTONIC) - started, letters, GC.count - gc_runs,
                RUN_DELAY.call - waited, env["HTTP_X_LOAD_WORKER"]&.to_i]
    [200, { "content-type" => "text/plain" }, [letters]]
  when "/reset"
    Generation.next!
    SHARDS.each(&:reset)
    [204, {}, []]
  when "/report"
    gc = GC.stat.slice(:count, :major_gc_count, :time) # time: milliseconds (Ruby 3.1+)
    [200, { "content-type" => "application/json" }, [JSON.generate(fanouts: FANOUTS, changes: CHANGES, gc: gc)]]
  else
    [404, { "content-type" => "text/plain" }, ["not found"]]
  end
}
