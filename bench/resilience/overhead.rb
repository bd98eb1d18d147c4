# frozen_string_literal: true

# The cost a circuit breaker adds to each call it protects: Weft::CircuitBreaker against Semian's
# circuit breaker (bulkhead off, so circuit breaker only) and Stoplight's (in-memory data
# store), in one process, the implementations interleaved within each round so that background
# load hits all alike. Run through bench/resilience/overhead, which writes
# bench/results/resilience.md.
require_relative "../support/bundle"
require "semian"
require "stoplight"
require_relative "../../lib/weft/resilience"
require_relative "../support/report"
require_relative "../support/results"

ROOT = File.expand_path("../..", __dir__)
ROUNDS = Integer(ENV.fetch("ROUNDS", "9"))
CALLS = Integer(ENV.fetch("CALLS", "200000"))
FAIL_EVERY = 10

Failure = Class.new(StandardError)

# Stoplight 5 and later (Ruby 3.3's bundle) take notifiers from the library's configuration;
# 4.1 (Ruby 3.1's) from each light's builder, below. None here: a notifier writes each change.
Stoplight.configure { |config| config.notifiers = [] } if Stoplight.respond_to?(:configure)

# One way of protecting a call: `run` calls the block through the breaker, `closed?` tells
# whether the breaker stayed closed (a row whose breaker opened would time refusals instead).
Contender = Struct.new(:label, :run, :closed?)

def weft(label, **options)
  breaker = Weft::CircuitBreaker.new("bench-#{label}", register: false, **options)
  Contender.new(label, ->(&block) { breaker.call(&block) }, -> { breaker.state == :closed })
end

def semian(label)
  # Semian counts errors, not a rate: it opens at error_threshold errors within
  # error_threshold_timeout. 1,000 errors in 1 ms never happen here, so it stays closed
  # (and its per-error bookkeeping, which scans the errors of that millisecond, stays small).
  resource = Semian.register("bench_#{label}", bulkhead: false, error_threshold: 1_000, error_timeout: 10,
                             error_threshold_timeout: 0.001, success_threshold: 2, exceptions: [Failure])
  Contender.new(label, ->(&block) { resource.acquire(&block) }, -> { resource.closed? })
end

def stoplight(label)
  # The default data store is the in-memory one; naming it explicitly would route every call
  # through Stoplight's `safely` wrapper, a second light per call. A success clears the failures,
  # so one failure in ten never reaches the threshold of 3.
  light = Stoplight("bench-#{label}")
  light = light.with_notifiers([]).build if light.respond_to?(:with_notifiers) # Stoplight 4.1's builder
  Contender.new(label, ->(&block) { light.run(&block) }, -> { light.color == Stoplight::Color::GREEN })
end

def bare(label)
  Contender.new(label, ->(&block) { block.call }, -> { true })
end

NOOP = proc { nil } # a proc, not a lambda: Semian passes its resource to the block

# @return [Float] ns per call
def measure(contender, failing)
  run = contender.run
  GC.start
  i = 0
  started = Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond)
  if failing
    while i < CALLS
      i += 1
      begin
        run.call { raise Failure if (i % FAIL_EVERY).zero? }
      rescue Failure
        nil
      end
    end
  else
    while i < CALLS
      i += 1
      run.call(&NOOP)
    end
  end
  (Process.clock_gettime(Process::CLOCK_MONOTONIC, :nanosecond) - started).to_f / CALLS
end

Row = Struct.new(:title, :failing, :contenders, :note)
ROWS = [
  Row.new("closed, block returns nil", false,
          [bare("no breaker"), weft("Weft"), semian("Semian"), stoplight("Stoplight"),
           weft("Weft, slow_call: 1", slow_call: 1), weft("Weft, window_seconds: 10", window_seconds: 10)]),
  Row.new("closed, 1 call in #{FAIL_EVERY} raises a counted error", true,
          [bare("no breaker"), weft("Weft"), semian("Semian"), stoplight("Stoplight")],
          <<~TEXT)
            The error propagates to the caller (no fallback). Each breaker stays closed in its own
            way: Weft judges a failure rate (10% here, threshold 50% of its last 100 calls);
            Semian counts errors within `error_threshold_timeout` (set to 1,000 errors in 1 ms);
            Stoplight clears its failures on every success. Much of the difference is the
            exception itself: Semian and Stoplight rescue it and raise it again, which costs
            about 3 µs on Ruby 3.1, while Weft records it in an `ensure` as it passes (and rescues
            it only when there is a fallback to hand it to).
          TEXT
].freeze

def load_average
  File.read("/proc/loadavg").split.first.to_f
rescue SystemCallError
  nil
end

load_before = load_average
results = ROWS.map do |row|
  samples = Hash.new { |hash, key| hash[key] = [] }
  row.contenders.each { |contender| measure(contender, row.failing) } # warm up
  ROUNDS.times do |round|
    # Rotate the order each round so that no contender always runs first or last.
    row.contenders.rotate(round).each { |contender| samples[contender.label] << measure(contender, row.failing) }
  end
  row.contenders.each do |contender|
    raise "#{contender.label} opened during '#{row.title}'; the numbers would time refusals" unless contender.closed?.call
  end
  medians = samples.transform_values { |values| values.sort[values.size / 2] }
  medians.each { |label, ns| warn format("%-45s %-28s %8.0f ns/call", row.title, label, ns) }
  [row, medians]
end

def overhead(medians, label)
  medians[label] - medians["no breaker"]
end

report = Bench::Report.new("Resilience: circuit breaker overhead per call", command: "bench/resilience/overhead (ROUNDS=#{ROUNDS}, CALLS=#{CALLS})")
versions = %w[semian stoplight].map { |name| "#{name} #{Gem.loaded_specs[name].version}" }.join(", ")
report.paragraph(<<~TEXT)
  Peers: #{versions} (the newest releases that install on Ruby #{RUBY_VERSION[/\A\d+\.\d+/]}). Each cell is the median of
  #{ROUNDS} rounds of #{CALLS} calls, in one process, the contenders interleaved within each round
  in a rotating order. "Overhead" is the cell minus the same loop without a breaker; the ratio
  is a peer's overhead over Weft's (above 1: Weft is cheaper). Every breaker is thread-safe
  (a mutex or monitor per call) and stays closed throughout (checked after the rounds).
  Weft, Semian and Stoplight are each configured as their docs suggest for a circuit breaker
  alone: Semian with `bulkhead: false`, Stoplight with its default in-memory data store and no
  notifiers. The extra Weft lines show the price of its options: `slow_call:` reads the clock
  before and after each call, a time-based window reads it after.
TEXT
results.each do |row, medians|
  weft_overhead = overhead(medians, "Weft")
  rows = medians.map do |label, ns|
    next [label, format("%.0f", ns), "-", "-"] if label == "no breaker"
    ratio = label.start_with?("Weft") ? "-" : format("%.2fx", overhead(medians, label) / weft_overhead)
    [label, format("%.0f", ns), format("%.0f", overhead(medians, label)), ratio]
  end
  report.paragraph("### #{row.title}")
  report.paragraph(row.note) if row.note
  report.table(["contender", "ns/call", "overhead ns/call", "peer / Weft overhead"], rows)
  report.chart("overhead, ns per call (shorter is better)",
               medians.reject { |label, _| label == "no breaker" }.map { |label, _| [label, overhead(medians, label)] },
               format: "%.0f")
end
load_after = load_average
if load_before && load_after
  # The run itself adds about 1 to the load.
  shared = load_before > 0.5 || load_after > 1.5 ? " The machine was shared with other jobs, so absolute figures are noisy; the ratios between contenders of one run, measured interleaved, are what to read." : ""
  report.paragraph("Load average (1 min) on #{Etc.nprocessors} cores: #{load_before} before the run, #{load_after} after (the run itself adds about 1).#{shared}")
end
report.paragraph(Bench::Results.sibling_link("resilience"))
report.write(Bench::Results.path("resilience"))
warn "wrote #{Bench::Results.path("resilience")}"
