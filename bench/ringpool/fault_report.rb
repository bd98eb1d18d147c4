# frozen_string_literal: true

require_relative "../support/report"

module RingpoolBench
  # Writes bench/results/ringpool-faults.md from the fault runs (Faults): per scenario, a summary
  # per server and the seconds around the fault, with charts of p90 and of the degraded share.
  class FaultReport
    BEFORE = 5 # seconds shown before the fault
    DEGRADED = %w[shard_unavailable storage_unavailable item_error].freeze

    # @param front [String, nil] the front the load went through (FRONT), described
    def initialize(config, settings, outcomes, front:, uptime_before:, uptime_after:)
      @config = config
      @settings = settings
      @outcomes = outcomes
      @front = front
      @uptime_before = uptime_before
      @uptime_after = uptime_after
    end

    def write(path)
      report = Bench::Report.new("ringpool under faults", command: ["bench/ringpool/run --faults", @config.environment].reject(&:empty?).join(" "))
      report.paragraph(<<~TEXT)
        The load test's app, pools and bodies (#{@config.pools} pools, #{@config.items} items a request) under
        #{@outcomes.map(&:server).uniq.join(', ')}, #{@config.shards} shards each, at a fixed #{@settings.rate} requests/s from JMeter (open
        loop) for #{@settings.seconds} s per scenario; the fault starts #{@settings.fault_at} s after the first request:

        - **stall**: shard 1's process is `SIGSTOP`ped for #{@settings.stall} s, then `SIGCONT`ed. Its pools' items
          should get their overflow number (`shard_unavailable`) within the deadline
          (#{deadline_ms} ms) while the other shard's are served, and p99 should stay ≤ the deadline + 20 ms.
        - **pg_restart**: PostgreSQL restarts (`pg_ctl restart -m fast`, every connection cut).

        `uptime` before: `#{@uptime_before}`; after: `#{@uptime_after}`. Degraded items are those
        answered `shard_unavailable`, `storage_unavailable` or with an item error; requests are
        placed in the second they were sent. "double allocations" counts pairs of rows of one
        number with overlapping lockouts in the allocations table afterwards (PostgreSQL's
        exclusion constraint forbids them; the count checks it held).
      TEXT
      if @front
        report.paragraph(<<~TEXT)
          **With a front:** JMeter sends to #{@front}, and each shard serves the public API on an
          address of its own (Weft: `RINGPOOL_SHARD_PORT`, apps/ringpool/config/weft.rb; Puma and
          Falcon: a single-process server per shard), as the seed's team ran a proxy per host in
          front of their shards. Without a front, the requests a stopped shard
          had accepted wait for JMeter's timeout whatever the server (ringpool-faults.md).
        TEXT
      end
      report.paragraph(@outcomes.uniq(&:server).map { |outcome| "- #{outcome.server}: #{outcome.described}" }.join("\n"))
      Faults::SCENARIOS.each { |scenario| section(report, scenario, @outcomes.select { |outcome| outcome.scenario == scenario }) }
      report.write(path)
    end

    private

    def deadline_ms
      Integer(ENV.fetch("RINGPOOL_DEADLINE_MS", "50"))
    end

    def section(report, scenario, outcomes)
      report.paragraph("## #{scenario}")
      report.table(["server", "fault lasted", "p99 during the fault", "p99 limit met", "degraded during", "degraded in the 10 s after",
                    "back under 1% degraded", "errors", "double allocations"],
                   outcomes.map { |outcome| summary_row(outcome) })
      seconds = (-BEFORE...(@settings.seconds - @settings.fault_at)).to_a
      header = ["s from fault", *outcomes.flat_map { |outcome| ["#{outcome.server} req", "#{outcome.server} p90", "#{outcome.server} p99", "#{outcome.server} degraded"] }]
      rows = seconds.map do |second|
        [second, *outcomes.flat_map do |outcome|
          sent = in_second(outcome, second)
          next ["0", "—", "—", "—"] if sent.empty?
          latencies = sent.map(&:elapsed).sort
          [sent.size, "#{percentile(latencies, 0.9)} ms", "#{percentile(latencies, 0.99)} ms", format("%.0f%%", degraded(sent) * 100)]
        end]
      end
      report.table(header, rows)
      outcomes.each do |outcome|
        pairs = seconds.filter_map do |second|
          sent = in_second(outcome, second)
          ["#{outcome.server} #{format('%+d', second)} s", percentile(sent.map(&:elapsed).sort, 0.9)] unless sent.empty?
        end
        report.chart("#{scenario}, #{outcome.server}: p90 per second, ms (the fault starts at +0 s)", pairs, format: "%.0f ms")
        shares = seconds.filter_map do |second|
          sent = in_second(outcome, second)
          ["#{outcome.server} #{format('%+d', second)} s", degraded(sent) * 100] unless sent.empty?
        end
        report.chart("#{scenario}, #{outcome.server}: share of items degraded per second, %", shares, format: "%.0f%%")
      end
    end

    def summary_row(outcome)
      during = outcome.samples.select { |sample| sample.start >= outcome.fault_from && sample.start < outcome.fault_to }
      after = outcome.samples.select { |sample| sample.start >= outcome.fault_to && sample.start < outcome.fault_to + 10_000 }
      p99 = percentile(during.map(&:elapsed).sort, 0.99)
      [outcome.server, format("%.1f s", (outcome.fault_to - outcome.fault_from) / 1000.0), p99 ? "#{p99} ms" : "—",
       outcome.scenario == "stall" && p99 ? (p99 <= deadline_ms + 20 ? "yes" : "no") : "—",
       format("%.1f%%", degraded(during) * 100), format("%.1f%%", degraded(after) * 100), recovery(outcome),
       outcome.samples.count { |sample| sample.status != 200 }, outcome.doubles]
    end

    # Seconds from the fault's end to the first second under 1% degraded that the rest of the run
    # stays under (the breakers' ramp included).
    def recovery(outcome)
      last = (@settings.seconds - @settings.fault_at) - 1
      fault_end = ((outcome.fault_to - outcome.fault_from) / 1000.0).ceil
      bad = (fault_end..last).select { |second| degraded(in_second(outcome, second)) >= 0.01 }
      return "at once" if bad.empty?
      return "not within the run" if bad.last == last

      "#{bad.last + 1 - fault_end} s after it ended"
    end

    def in_second(outcome, second)
      from = outcome.fault_from + (second * 1000)
      outcome.samples.select { |sample| sample.start >= from && sample.start < from + 1000 }
    end

    def degraded(samples)
      items = samples.sum { |sample| sample.kinds.values.sum }
      return 0.0 if items.zero?

      samples.sum { |sample| DEGRADED.sum { |kind| sample.kinds[kind] } }.fdiv(items)
    end

    def percentile(sorted, share)
      return nil if sorted.empty?

      sorted[[(share * sorted.size).ceil - 1, 0].max]
    end
  end
end
