# frozen_string_literal: true

# Why a pipeline segment goes out with a single statement: the segment hold (Pipeline#hold_back)
# diagnosed under a controlled CPU load. Fibers loop a statement through a pool (as
# test/postgres/segment_hold_test.rb and pool_bench.rb do) while every sync point is counted by
# the path that closed its segment and by its size, and every end-of-turn flush by what
# hold_back saw.
#
#   bundle exec ruby bench/postgres/hold_load.rb [seconds] [fibers] [connections] [hogs,...]
#   HOLD=guard,never,always,wall (default guard): the hold as shipped, never made, made whenever
#     callers are coming (the guard taken out), or guarded by the turn's wall time alone (not
#     less the share the thread lately waited for a core, CoreWait#recent); ROUNDS=n repeats
#     the lot
#   TEST_ROUNDS=n: as the test measures (a new pool, each fiber 1 + n statements, all counted)
#     instead of `seconds` after a warm-up
#   HOLD_TRACE=n: writes the first n events (submits, sync points, wake-ups, end-of-turn
#     flushes, by reactor poll) to tmp/hold_trace.txt; HOLD_WAKE_CALLER=1 adds who woke whom
#
# `hogs` CPU-bound processes (`while :; do :; done` shells, nice 0, not pinned) run beside the
# measurement: the load of 0, 1, 2, 3 "other processes" on this machine's cores. They are
# started and killed by this script. The counting costs a few µs per segment; figures of
# statements/s are for comparing runs of this script only.

require_relative "support"
require "weft"
require "weft/postgres"

module PostgresBench
  # Counters of HoldLoad, filled by the wrappers below.
  module HoldLoad
    # Why a sync point was sent, by the method that sent it.
    PATHS = {
      deferred_flush: "end-of-turn flush",
      held_again: "end-of-turn flush of a held segment (not all came back)",
      flush_held: "held flush (last woken caller)",
      wait_and_read: "reader, socket ready (poll)",
      lead: "reader, before it waits",
      submit_alone: "statement sent alone",
      other: "other (thread, resend)",
    }.freeze

    class << self
      attr_accessor :stats, :mode
      # With HOLD_TRACE=n, the first n events of the measurement, for reading turn by turn.
      attr_accessor :events

      def event(*what)
        events = @events or return
        return if events.size >= TRACE_LIMIT
        scheduler = Weft.scheduler
        events << [scheduler.instance_variable_get(:@polls), scheduler.instance_variable_get(:@hold_load_phase) || :poll,
                   Fiber.current.object_id % 10_000, *what]
      end

      # The share of its time the reactor's thread recently waited for a core (CoreWait#recent).
      def core_share(pool)
        pool.instance_variable_get(:@slow_statements).instance_variable_get(:@core_wait).recent
      end

      def reset
        @stats = {
          sizes: Hash.new { |hash, path| hash[path] = Hash.new(0) }, # path => size => segments
          lone_why: Hash.new(0), # end-of-turn flushes that wrote one statement, by what hold_back saw
          holds: 0, held_ready: [], held_for: [],
          busy: [], turn_cpu: [], estimated: [], syncs_per_read: Hash.new(0),
          settled_per_poll: Hash.new(0), # reactor poll => statements settled in it
          drained: 0, alone: 0, lone_in_line: 0,
        }
      end
    end
    reset

    # Wrapped around Weft::Postgres::Pipeline (prepended).
    module Counting
      def sync
        path = @hold_load_path || :other
        HoldLoad.event(:sync, path, @unsynced)
        if HoldLoad.stats
          HoldLoad.stats[:sizes][path][@unsynced] += 1
          HoldLoad.stats[:lone_in_line] += 1 if @unsynced == 1 && !@owner.instance_variable_get(:@slot_queue).empty?
        end
        super
      end

      def with_path(path)
        outer = @hold_load_path
        @hold_load_path = path
        yield
      ensure
        @hold_load_path = outer
      end

      def deferred_flush
        stats = HoldLoad.stats
        return super unless stats

        scheduler = @flush_scheduler
        held = @held
        unwritten = @unwritten
        settled = @settled
        ready = scheduler.ready?
        busy = scheduler.busy
        stats[:busy] << busy
        stats[:turn_cpu] << Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID) - scheduler.hold_load_turn_cpu
        stats[:estimated] << busy * (1.0 - HoldLoad.core_share(@owner))
        outcome = with_path(held ? :held_again : :deferred_flush) { super }
        HoldLoad.event(:end_of_turn, "held=#{held} unwritten=#{unwritten} settled=#{settled} ready=#{ready} busy=#{(busy * 1e6).round}us now_held=#{@held}")
        if !@flush_scheduled && unwritten == 1 # it wrote a single statement
          why = if held then "held once already, not all came back"
                elsif settled <= unwritten then "no caller woken here (settled #{settled > 1 ? '>1' : settled})"
                elsif !ready then "no fiber ready"
                elsif busy >= Weft::Postgres::Pipeline::HOLD_TURN then "turn over HOLD_TURN"
                else "hold mode never"
                end
          stats[:lone_why][why] += 1
        end
        outcome
      end

      def hold_back(settled)
        held = super
        if held && HoldLoad.stats
          HoldLoad.stats[:holds] += 1
          HoldLoad.stats[:held_ready] << @flush_scheduler.instance_variable_get(:@ready).size
          HoldLoad.stats[:held_for] << settled
        end
        held
      end

      def callers_coming?
        case HoldLoad.mode
        when "never" then false
        when "always" then @flush_scheduler.ready?
        when "wall" # the guard before the core wait was taken off the turn (2026-12-07)
          @flush_scheduler.ready? && @flush_scheduler.busy < Weft::Postgres::Pipeline::HOLD_TURN
        else super
        end
      end

      def flush_held
        with_path(:flush_held) { super }
      end

      def wait_and_read(*)
        with_path(:wait_and_read) { super }
      end

      def settle_ready
        return super unless HoldLoad.stats

        syncs = @syncs
        settled = @settled
        super.tap do
          HoldLoad.stats[:syncs_per_read][syncs - @syncs] += 1 if syncs > 0
          woken = @settled - settled
          HoldLoad.event(:settled, syncs - @syncs, woken) if woken > 0
          if woken > 0
            polls = Weft.scheduler.instance_variable_get(:@polls)
            HoldLoad.stats[:settled_per_poll][polls] += woken
          end
        end
      end

      def lead(*)
        with_path(:lead) { super }
      end

      def submit(request)
        HoldLoad.event(:submit, @unwritten, @held ? "held_for=#{@hold_for}" : "")
        request.alone ? with_path(:submit_alone) { super } : super
      end
    end
    Weft::Postgres::Pipeline.prepend(Counting)

    TRACE_LIMIT = Integer(ENV.fetch("HOLD_TRACE", 0))

    # Marks the part of the reactor's turn that runs woken fibers (for the event trace).
    module TurnPhase
      # The thread's CPU time when the turn began (see Counting#deferred_flush).
      attr_reader :hold_load_turn_cpu

      def run_once
        @hold_load_turn_cpu = Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID)
        super
      end

      def run_ready
        @hold_load_phase = :run
        super
      ensure
        @hold_load_phase = :poll
      end

      # With HOLD_WAKE_CALLER set, the trace shows who woke the fiber.
      def wake(fiber, *)
        woken = super
        HoldLoad.event(:wake, fiber.object_id % 10_000, waker) if woken && HoldLoad.events
        woken
      end

      def waker
        return nil unless ENV["HOLD_WAKE_CALLER"]
        caller(2, 12).grep_v(/hold_load/).map { |line| line[%r{[^/]+:\d+:in .*}] }.join(" < ")
      end
    end
    Weft::Scheduler.prepend(TurnPhase)

    # Counts the pool's hand-overs: connections drained and given back, statements run alone.
    module PoolCounting
      def pipeline_drained(pipeline)
        HoldLoad.stats[:drained] += 1 if HoldLoad.stats
        HoldLoad.event(:drained)
        super
      end

      def run_alone(*)
        HoldLoad.stats[:alone] += 1 if HoldLoad.stats
        HoldLoad.event(:run_alone)
        super
      end

    end
    Weft::Postgres::Pool.prepend(PoolCounting)

    module_function

    # Starts `count` CPU hogs; returns their pids.
    def start_hogs(count)
      Array.new(count) { Process.spawn("sh", "-c", "while :; do :; done") }
    end

    def stop_hogs(pids)
      pids.each { |pid| Process.kill(:KILL, pid) rescue nil } # rubocop:disable Style/RescueModifier
      pids.each { |pid| Process.wait(pid) rescue nil } # rubocop:disable Style/RescueModifier
    end

    # Runs `fibers` fibers looping `select 1` over `connections` for `seconds` after a warm-up.
    # @return [Array(Integer, Float, Hash, Hash)] statements, wall seconds, cpu seconds, pool statistics
    def measure(seconds, fibers, connections)
      return measure_rounds(Integer(ENV["TEST_ROUNDS"]), fibers, connections) if ENV["TEST_ROUNDS"]

      pool = Weft::Postgres::Pool.new(PostgresBench.database[:url], limit: connections)
      count = 0
      wall = cpu = queries_before = pipelined_before = nil
      Weft.run do
        measuring = false
        deadline = nil
        workers = Array.new(fibers) do
          Weft.spawn do
            until deadline && PostgresBench.now >= deadline
              pool.query("select 1")
              count += 1 if measuring
            end
          end
        end
        sleep 0.5
        start_counting
        queries_before, pipelined_before = pool.statistics.values_at(:queries, :pipelined)
        count = 0
        measuring = true
        times = Process.times
        started = PostgresBench.now
        deadline = started + seconds
        Weft.gather(workers)
        wall = PostgresBench.now - started
        cpu = cpu_since(times)
      end
      [count, wall, cpu, pool.statistics.merge(queries: pool.statistics[:queries] - queries_before,
                                               pipelined: pool.statistics[:pipelined] - pipelined_before)]
    ensure
      pool&.close
    end

    # As test/postgres/segment_hold_test.rb measures: a new pool, each fiber runs 1 + `rounds`
    # statements, everything counted from the start.
    def measure_rounds(rounds, fibers, connections)
      pool = Weft::Postgres::Pool.new(PostgresBench.database[:url], limit: connections)
      wall = cpu = nil
      Weft.run do
        start_counting
        times = Process.times
        started = PostgresBench.now
        Weft.gather(Array.new(fibers) { Weft.spawn { (1 + rounds).times { pool.query("select 1") } } })
        wall = PostgresBench.now - started
        cpu = cpu_since(times)
      end
      [fibers * (1 + rounds), wall, cpu, pool.statistics]
    ensure
      pool&.close
    end

    def start_counting
      HoldLoad.reset
      HoldLoad.events = [] if TRACE_LIMIT > 0
    end

    def cpu_since(times)
      after = Process.times
      after.utime + after.stime - times.utime - times.stime
    end

    def percentile(values, share)
      return 0.0 if values.empty?
      sorted = values.sort
      sorted[(share * (sorted.size - 1)).round]
    end

    def report(seconds, fibers, connections, hogs)
      pids = start_hogs(hogs)
      sleep 0.5 if hogs > 0
      load_before = File.read("/proc/loadavg").split.first
      count, wall, cpu, statistics = measure(seconds, fibers, connections)
      stats = HoldLoad.stats
      HoldLoad.stats = nil
      lines = []
      lines << format("mode=%s hogs=%d fibers=%d connections=%d load(1m)=%s %s", HoldLoad.mode, hogs, fibers,
                      connections, load_before, RUBY_DESCRIPTION[/\A\S+ \S+/] + (defined?(RubyVM::YJIT) && RubyVM::YJIT.enabled? ? " +YJIT" : ""))
      all = Hash.new(0)
      stats[:sizes].each_value { |sizes| sizes.each { |size, n| all[size] += n } }
      segments = all.values.sum
      statements = all.sum { |size, n| size * n }
      ones = all[1]
      lines << format("statements %d in %.2fs = %d/s, CPU %.1f µs/statement; segments %d, %.1f statements/segment, " \
                      "one-statement %.1f%%; slow marked %s", count, wall, count / wall, cpu * 1e6 / count, segments,
                      statements.to_f / segments, ones * 100.0 / segments, statistics[:slow_marked].inspect)
      PATHS.each do |path, label|
        sizes = stats[:sizes][path]
        next if sizes.empty?
        n = sizes.values.sum
        lines << format("  %-58s %6d segments, %5.1f%% of all; of them one-statement %5.1f%% (%.1f%% of all)",
                        label, n, n * 100.0 / segments, sizes[1] * 100.0 / n, sizes[1] * 100.0 / segments)
      end
      lines << format("  one-statement segments closed while callers waited in the pool's slot line: %d (%.1f%% of all segments)",
                      stats[:lone_in_line], stats[:lone_in_line] * 100.0 / segments)
      lines << "  one-statement end-of-turn flushes, by what hold_back saw:"
      stats[:lone_why].sort_by { |_, n| -n }.each { |why, n| lines << format("    %-52s %6d", why, n) }
      busy = stats[:busy]
      lines << format("  turns (Scheduler#busy at the end-of-turn flush): median %.0f µs, p90 %.0f µs, p99 %.0f µs, over HOLD_TURN %.1f%%",
                      percentile(busy, 0.5) * 1e6, percentile(busy, 0.9) * 1e6, percentile(busy, 0.99) * 1e6,
                      busy.count { |b| b >= Weft::Postgres::Pipeline::HOLD_TURN } * 100.0 / [busy.size, 1].max)
      cpu = stats[:turn_cpu]
      lines << format("  the same turns' CPU time (this thread's, up to the flush): median %.0f µs, p90 %.0f µs, over HOLD_TURN %.1f%%",
                      percentile(cpu, 0.5) * 1e6, percentile(cpu, 0.9) * 1e6,
                      cpu.count { |c| c >= Weft::Postgres::Pipeline::HOLD_TURN } * 100.0 / [cpu.size, 1].max)
      estimated = stats[:estimated]
      lines << format("  the same turns' wall time less the thread's recent core-wait share: median %.0f µs, p90 %.0f µs, over HOLD_TURN %.1f%%",
                      percentile(estimated, 0.5) * 1e6, percentile(estimated, 0.9) * 1e6,
                      estimated.count { |c| c >= Weft::Postgres::Pipeline::HOLD_TURN } * 100.0 / [estimated.size, 1].max)
      lines << format("  holds %d; held for (settled) median %d; fibers ready at the hold median %d",
                      stats[:holds], percentile(stats[:held_for], 0.5), percentile(stats[:held_ready], 0.5))
      lines << "  sync points per settle_ready: " + stats[:syncs_per_read].sort.map { |k, v| "#{k}:#{v}" }.join(" ")
      per_poll = stats[:settled_per_poll].values.tally.sort_by { |_, n| -n }.first(8)
      lines << "  statements settled per poll (count of polls): " + per_poll.map { |k, v| "#{k}:#{v}" }.join(" ")
      if (events = HoldLoad.events)
        HoldLoad.events = nil
        File.write("tmp/hold_trace.txt", events.map { |event| event.join(" ") }.join("\n"))
      end
      lines << format("  pool: %d of %d statements pipelined; pipelines emptied %d times; statements run alone %d; max depth %d",
                      statistics[:pipelined], statistics[:queries], stats[:drained], stats[:alone], statistics[:max_depth])
      lines.join("\n")
    ensure
      stop_hogs(pids) if pids
    end
  end
end

if $PROGRAM_NAME == __FILE__
  seconds, fibers, connections = ARGV.fetch(0, 3).to_f, Integer(ARGV.fetch(1, 40)), Integer(ARGV.fetch(2, 1))
  hog_steps = ARGV.fetch(3, "0").split(",").map { |hogs| Integer(hogs) }
  Integer(ENV.fetch("ROUNDS", 1)).times do
    hog_steps.each do |hogs|
      ENV.fetch("HOLD", "guard").split(",").each do |mode|
        PostgresBench::HoldLoad.mode = mode
        puts PostgresBench::HoldLoad.report(seconds, fibers, connections, hogs), ""
      end
    end
  end
end
