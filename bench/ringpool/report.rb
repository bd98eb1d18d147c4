# frozen_string_literal: true

require_relative "../support/report"

module RingpoolBench
  # Writes bench/results/ringpool.md from the steps of a run: the servers side by side, then for
  # each its verdict against the seed's SLA, per-rate tables and a chart of latency against
  # rate; setup, and how the load was made.
  class LoadReport
    # One server's part of the run.
    ServerRun = Struct.new(:name, :server, :steps, :seeding, :ownership)

    SLA_MS = 200
    TIGHT_MS = 20

    # Erlang's loss formula: the share of arrivals that find all `servers` busy when `load`
    # erlangs are offered (here: a pool of `servers` numbers, each held for the lockout).
    def self.erlang_b(servers, load)
      (1..servers).reduce(1.0) { |blocked, k| load * blocked / (k + (load * blocked)) }
    end

    # @param runs [Array<ServerRun>] in the order they ran
    # @param pools [Array<(Integer, Integer)>] id and size of each pool (the same for every server)
    def initialize(config, runs, pools:, postgres:, uptime_before:, uptime_after:)
      @config = config
      @runs = runs
      @pools = pools
      @numbers = pools.sum(&:last)
      @postgres = postgres
      @uptime_before = uptime_before
      @uptime_after = uptime_after
    end

    def write(path)
      report = Bench::Report.new("ringpool: load test against the seed's SLA",
                                 command: [@config.environment, "bench/ringpool/run"].reject(&:empty?).join(" "))
      report.paragraph(tools)
      side_by_side(report)
      report.paragraph(criteria)
      @runs.each { |run| server_sections(report, run) }
      report.paragraph(setup)
      report.paragraph(method)
      report.paragraph(missing)
      report.write(path)
    end

    private

    def side_by_side(report)
      report.paragraph(<<~TEXT)
        ## Side by side

        The same app, pools and request bodies under each server, the servers one after another
        (each on a fresh database seeded alike). Per offered rate: achieved requests/s, p90, and
        the share of items degraded (see below); — where a server's run had stopped at a lower
        rate that broke.
      TEXT
      rates = @runs.flat_map { |run| run.steps.map(&:rate) }.uniq.sort
      header = ["offered req/s", *@runs.flat_map { |run| ["#{run.name} achieved", "#{run.name} p90", "#{run.name} p99", "#{run.name} degraded"] }]
      rows = rates.map do |rate|
        [rate, *@runs.flat_map do |run|
          step = run.steps.find { |candidate| candidate.rate == rate }
          next %w[— — — —] unless step
          [format("%.0f", step.achieved), "#{step.percentile(0.9)} ms", "#{step.percentile(0.99)} ms", format("%.1f%%", step.degraded_share * 100)]
        end]
      end
      report.table(header, rows)
      pairs = rates.flat_map do |rate|
        @runs.filter_map do |run|
          step = run.steps.find { |candidate| candidate.rate == rate }
          ["#{rate} req/s #{run.name}", step.percentile(0.9)] if step
        end
      end
      report.chart("p90 against offered rate, ms", pairs, format: "%.0f ms")
      report.paragraph(@runs.map { |run| "- #{run.name}: #{summary(run)}" }.join("\n"))
    end

    def server_sections(report, run)
      report.paragraph("## #{run.name}: #{run.server.description}")
      report.paragraph(verdict(run))
      report.table(["offered req/s", "achieved req/s", "allocations/s", "p50", "p90", "p99", "max", "errors",
                    "sends per 100 ms (min / median / max)", "JMeter threads"], run.steps.map { |step| latency_row(step) })
      report.chart("#{run.name}: latency against offered rate, ms (p50, p90, p99)", chart_pairs(run), format: "%.0f ms")
      report.paragraph(<<~TEXT)
        Items by answer, as counted in the responses (JMeter's regular expressions on each body).
        "expected exhausted" is what Erlang's loss formula gives for these pools at the achieved
        rate (each pool a loss system of its size, offered its share of the items for one lockout):
        the app's rotation should match it while shards keep up. CPU is in cores (100% = one core
        busy for the whole window) over the measured window, from /proc: ringpool's master and
        shard processes, PostgreSQL's postmaster and backends, JMeter's JVM; "machine" is the share
        of all #{Etc.nprocessors} cores busy with anything, this run's processes and the other jobs alike.
        The last columns count the server's warnings in the window: a shard's reactor held for a
        second or more (Weft's stall report; on a starved machine, mostly a process waiting for a
        CPU), and a shard's ownership upkeep failing (its statements on PostgreSQL took more than
        3–4 s; it then drops all its pools, whose items get `shard_unavailable`, until the upkeep
        works again; Weft's log only), and a peer's breaker opening (a shard stops calling a peer
        for its open time, then ramps: that peer's items get `shard_unavailable` meanwhile; the
        app logs it, under any server).
      TEXT
      report.table(["offered req/s", "tracked", "exhausted", "shard_unavailable", "storage_unavailable", "item errors",
                    "expected exhausted", "CPU ringpool", "CPU PostgreSQL", "CPU JMeter", "machine busy",
                    "reactor stalls ≥ 1 s", "ownership upkeep failed", "breakers opened", "load average before"],
                   run.steps.map { |step| items_row(step) })
      report.paragraph(busiest(run))
    end

    def tools
      load = @uptime_before[/load average: ([\d.]+)/, 1].to_f
      <<~TEXT.strip
        Load tool: JMeter #{JMeter.version} (Debian, non-GUI, `bench/support/open_loop.jmx`, request from `bench/ringpool/jmeter.rb`) on
        #{JMeter.java_version}; PostgreSQL #{@postgres} (a private cluster: fsync off, synchronous_commit off,
        shared_buffers 32 MB); servers: #{@runs.map(&:name).join(', ')}, #{@config.shards} shards each. Everything —
        load generator, shards, PostgreSQL — on this one machine. Each rate is a JMeter run of its own, its threads
        started over #{@config.ramp} s (RAMP), measured from #{@config.warmup} s after the last one started for #{@config.step} s.

        **The machine was shared.** `uptime` before the run: `#{@uptime_before}`; after: `#{@uptime_after}`.
        #{load >= 1 ? "A 1-minute load of #{load} on #{Etc.nprocessors} cores before the run started: other jobs (builds, tests and benchmarks of other work on this machine) took CPU throughout, so every figure here is a floor, not what the machine can do alone." : "Little else was running when the run started."}
        The "machine busy" column shows how busy the cores were during each step, and "load average
        before" the 1-minute load as each step started (the previous step's processes included).
      TEXT
    end

    def thousands(number)
      number.to_s.reverse.scan(/\d{1,3}/).join(",").reverse
    end

    # One line: the highest rate holding the SLA, and where the run broke.
    def summary(run)
      sla = run.steps.select { |step| step.holds?(SLA_MS) }.max_by(&:rate)
      broken = run.steps.find { |step| step.broken?(@config) }
      held = sla ? "held p90 < #{SLA_MS} ms up to #{sla.rate} req/s (#{thousands((sla.achieved * @config.items).round)} allocations/s)" : "held the SLA at none of the rates"
      "#{held}; #{broken ? "broke at #{broken.rate} req/s (#{why_broken(broken)})" : "no rate broke up to #{run.steps.last&.rate} req/s"}"
    end

    def verdict(run)
      steps = run.steps
      sla = steps.select { |step| step.holds?(SLA_MS) }.max_by(&:rate)
      tight = steps.select { |step| step.holds?(TIGHT_MS) }.max_by(&:rate)
      fast = steps.select { |step| step.holds?(SLA_MS, latency_only: true) }.max_by(&:rate)
      broken = steps.find { |step| step.broken?(@config) }
      lowest = steps.first&.rate
      describe = lambda do |step|
        if step
          format("**%d requests/s** (%s allocations/s; p90 %d ms, achieved %.0f req/s, %.1f%% of items degraded)", step.rate,
                 thousands((step.achieved * @config.items).round), step.percentile(0.9), step.achieved,
                 step.degraded_share * 100)
        else
          "**none of the rates measured** (the lowest was #{lowest} requests/s)"
        end
      end
      <<~TEXT.strip
        - Highest rate measured that holds the seed's SLA, **p90 < #{SLA_MS} ms** with #{@config.items} allocations a request: #{describe.call(sla)}.
        - Highest rate measured that holds **p90 < #{TIGHT_MS} ms**: #{describe.call(tight)}.
        - Counting latency alone (however many items got a fallback overflow number), p90 < #{SLA_MS} ms held up to #{describe.call(fast)}.
        - #{broken ? "Broke at **#{broken.rate} requests/s** (#{why_broken(broken)}); the run stopped there." : "No rate broke up to #{steps.last&.rate} requests/s."}
        - Issue #10's target, 2,000 requests/s (80,000 allocations/s) with p90 < #{SLA_MS} ms on this machine: #{sla && sla.rate >= 2000 ? '**met**' : '**not met**'}.
      TEXT
    end

    def criteria
      <<~TEXT.strip
        A rate "holds" a limit when its p90 is under the limit, at least 95% of the offered rate was
        achieved, under 1% of requests failed and under 1% of items were *degraded* — answered with
        the overflow number for `shard_unavailable` or `storage_unavailable` (the owner was too slow
        or PostgreSQL missed the deadline), or with an item error; `exhausted` is the pool's normal
        answer and does not count. A rate "breaks" when less than 90% was achieved, the p90
        passed #{(@config.break_p90 * 1000).round} ms, or more than 5% failed. Only the rates in the table were
        measured: the highest rate that holds lies between a holding rate and the next one.
      TEXT
    end

    def why_broken(step)
      reasons = []
      reasons << format("achieved %.0f of %.0f req/s", step.achieved, step.offered) if step.achieved < 0.9 * step.offered
      reasons << "p90 #{step.percentile(0.9)} ms" if (step.percentile(0.9) || Float::INFINITY) > @config.break_p90 * 1000
      reasons << format("%.1f%% of requests failed", step.error_share * 100) if step.error_share > 0.05
      reasons.join(", ")
    end

    def latency_row(step)
      [step.rate == step.offered.round ? step.rate.to_s : format("%d (%.1f)", step.rate, step.offered),
       format("%.0f", step.achieved), thousands((step.achieved * @config.items).round),
       *[0.5, 0.9, 0.99].map { |share| "#{step.percentile(share)} ms" }, "#{step.latencies.last} ms",
       step.errors.zero? ? "0" : format("%d (%.1f%%)", step.errors, step.error_share * 100),
       step.arrivals.join(" / ") + format(" (%g expected)", (step.offered / 10).round(1)), step.threads]
    end

    def items_row(step)
      percent = ->(share) { format("%.1f%%", share * 100) }
      [step.rate, *JMeter::KINDS.map { |kind| percent.call(step.share(kind)) }, percent.call(expected_exhausted(step)),
       *%i[server postgres jmeter].map { |key| format("%.0f%%", step.cpu[key] * 100) }, percent.call(step.cpu[:machine]),
       step.warnings[:stalls], step.warnings[:ownership_lost], step.warnings[:breakers_opened], step.load_before]
    end

    # The exhausted share Erlang's formula expects at the items/s the owners decided on (tracked
    # + exhausted), each pool offered its share in proportion to its size.
    def expected_exhausted(step)
      decided = (step.kinds["tracked"] + step.kinds["exhausted"]) / step.seconds
      return 0.0 if decided.zero?

      blocked = @pools.sum do |_, size|
        arrivals = decided * size / @numbers
        arrivals * self.class.erlang_b(size, arrivals * @config.lockout)
      end
      blocked / decided
    end

    def chart_pairs(run)
      run.steps.flat_map do |step|
        { "p50" => 0.5, "p90" => 0.9, "p99" => 0.99 }.map { |name, share| ["#{step.rate} req/s #{name}", step.percentile(share)] }
      end
    end

    def setup
      sizes = @pools.map(&:last).sort
      <<~TEXT.strip
        ## Setup

        **Pools.** #{@pools.size} ring pools created through `POST /ring_pools` (#{@runs.map { |run| format('%.1f s under %s', run.seeding, run.name) }.join(', ')}), #{thousands(@numbers)} numbers
        in all: sizes drawn log-uniformly from #{@config.sizes.first} to #{@config.sizes.last} (many small pools, few large ones:
        median #{sizes[sizes.size / 2]}, smallest #{sizes.first}, largest #{sizes.last}), every pool with a #{@config.lockout} s lockout. The
        shards then shared them out (pools per shard): #{@runs.map { |run| "#{run.name} #{run.ownership.values.sort.join(' / ')}#{unowned(run)}" }.join('; ')}.

        **Requests.** #{@config.bodies} different bodies, pregenerated, each of #{@config.items} items; each item names a
        pool drawn with probability proportional to its size (a customer sizes a pool to its traffic,
        so every number sees the same demand) and carries tracking params (`campaign`, `source`,
        `visitor`) that vary. JMeter sends them in turn, over and over.

        **Why these sizes and lockout.** With demand proportional to size, each number is offered
        rate × #{@config.items} / #{thousands(@numbers)} allocations a second, and holds each for the lockout: at
        #{@config.lockout} s that is an occupancy of #{format('%.2f', 250 * @config.items * @config.lockout / @numbers.to_f)} at 250 requests/s and #{format('%.2f', 2000 * @config.items * @config.lockout / @numbers.to_f)} at 2,000.
        A pool then overflows as Erlang's loss formula says for its size: large pools almost never,
        2- and 3-number pools now and then — a realistic picture (most allocations tracked, overflow
        concentrated on undersized pools), where a fixed-size batch over uniformly chosen pools
        would exhaust the small pools at once and make the overflow share, not the server, the
        story. The lockout is short (real ones are minutes) because this test's demand per number
        is far higher than a real customer's; what matters for the server is the occupancy. The
        lockout is whole seconds (the API's unit), so 1 s is the shortest.
      TEXT
    end

    # Which process tree used the most CPU at each rate, from the table above.
    def busiest(run)
      names = { server: "ringpool's shards", postgres: "PostgreSQL", jmeter: "JMeter" }
      lines = run.steps.map do |step|
        key = names.keys.max_by { |name| step.cpu[name] }
        format("%d req/s: %s (%.0f%% of a core)", step.rate, names[key], step.cpu[key] * 100)
      end
      "Busiest process tree per rate: #{lines.join('; ')}."
    end

    def unowned(run)
      missing = @pools.size - run.ownership.values.sum
      missing.positive? ? " (#{missing} without an owner 30 s after seeding; the run went on)" : ""
    end

    def method
      groups = @runs.first.steps.map { |step| "#{step.rate}: #{step.groups.map { |per_second, interval| format('%g/s (%d ms)', per_second, interval) }.join(' + ')}" }
      <<~TEXT.strip
        ## How the load is made (open loop)

        JMeter 2.13 as Debian 12 ships it cannot load any test plan (its XStream, 1.4.20, refuses
        JMeter's own classes: `ForbiddenClassException: org.apache.jmeter.save.ScriptWrapper`), so
        the run starts it through `bench/support/JMeterLauncher.java`, which grants JMeter's
        XStream its types and then calls JMeter's own entry point; the load, the timing and the
        results are JMeter's.

        Each thread group of the plan has one schedule (a Constant Throughput Timer in "all active
        threads in current thread group (shared)" mode): a ready thread takes the next slot, the
        last one given out plus 1,000 / k ms, and waits for it. Sends therefore leave on the
        schedule whatever the latency of earlier answers, as long as some thread is free; there are
        rate × #{@config.headroom} s threads (Little's law: up to #{(@config.headroom * 1000).round} ms of latency before the schedule
        runs out of threads), each with its own keep-alive connection. A slot with no free thread is
        skipped, not made up (no burst afterwards), and shows as an achieved rate below the offered
        one: a slow server cannot hide its latency by slowing the load down. The timer counts whole
        milliseconds, so each rate is a sum of schedules of 1,000 / k requests/s (#{groups.join('; ')}).
        "sends per 100 ms" shows how evenly requests left. Latency is JMeter's: from the request's
        send to the last byte of the answer, in whole milliseconds, over loopback TCP.

        Each rate: JMeter starts, its threads start (seconds, on a busy machine), then #{@config.warmup} s of
        warm-up, then #{@config.step} s measured (the window; requests are counted by when they were sent).
        The state of the pools carries over from rate to rate.
      TEXT
    end

    def missing
      <<~TEXT.strip
        ## Not measured here

        - The fault scenarios (a shard `SIGSTOP`ped, PostgreSQL restarted): `bench/ringpool/run --faults`,
          [ringpool-faults.md](ringpool-faults.md).
        - Where the time goes: [ringpool-notes.md](ringpool-notes.md) (hand-written from a run like this one,
          with `pg_stat_activity` samples); no Ruby profile yet.
        - Long steps and a quiet machine: the defaults measure #{@config.step} s per rate, on a shared machine.
      TEXT
    end
  end
end
