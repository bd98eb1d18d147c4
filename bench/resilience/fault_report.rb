# frozen_string_literal: true

require_relative "../support/report"

module FaultBench
  # Turns the runs of bench/resilience/fault into bench/results/resilience_fault.md: per-second
  # latency of the fan-out (as hey saw it) and admission to the slow shard (as the app recorded
  # it), per-phase summaries, charts, what the machine was doing meanwhile, and the verdict on
  # "p99 <= deadline + 10 ms while the shard is slow".
  class FaultReport
    SLACK = 0.010
    # A fan-out whose thread waited this long for a CPU was held up by the machine.
    CPU_WAIT = 0.005
    BLOCKS = [" ", "▁", "▂", "▃", "▄", "▅", "▆", "▇", "█"].freeze
    PHASES = %w[warm-up healthy slow healed].freeze
    PHASE_MARKS = { "warm-up" => "w", "healthy" => "h", "slow" => "S", "healed" => "r" }.freeze
    # The outcome letters of a call to a shard (see fault_app.ru).
    LETTERS = %w[A F R C N].freeze

    # One of hey's requests, placed on the app's clock: `at` is when the app started the fan-out
    # (the record it is paired with, `fanout`), or hey's own start time moved by its process's
    # offset when no record pairs with it.
    Request = Struct.new(:at, :latency, :status, :fanout)

    # One second of one run.
    Second = Struct.new(:t, :phase, :latencies, :statuses, :server, :letters, :others, :arrivals, :machine,
                        keyword_init: true) do
      def sent = latencies.size
      def errors = statuses.count { |status| status != 200 }
      def served = server.size

      # @return [Float, nil] the share of calls to the slow shard that the breaker let run
      def admitted
        FaultReport.admitted(letters.tally)
      end
    end

    # @param outcomes [Hash{String=>Integer}] calls to a shard by outcome letter
    # @return [Float, nil] the share the breaker let run, of the calls that reached it (a call
    #   that never started, N, did not)
    def self.admitted(outcomes)
      ran = outcomes.fetch("A", 0) + outcomes.fetch("F", 0) + outcomes.fetch("C", 0)
      total = ran + outcomes.fetch("R", 0)
      total.zero? ? nil : ran.fdiv(total)
    end

    # Percentile by nearest rank.
    def self.percentile(sorted, share)
      return nil if sorted.empty?
      sorted[[(share * sorted.size).ceil - 1, 0].max]
    end

    # @param rounds [Array<Array<Hash>>] per round, the runs of Run#call; the report details the
    #   first round and gives the verdict of each
    def initialize(config, rounds, uptime_before:, uptime_after:)
      @config = config
      @rounds = rounds
      @runs = rounds.first.sort_by { |run| config.variants.index(run[:variant]) }
      @uptime_before = uptime_before
      @uptime_after = uptime_after
      @limit = config.deadline + SLACK
      @seconds = @runs.to_h { |run| [run[:variant], seconds(run)] }
    end

    def write(path)
      report = Bench::Report.new("Resilience: the fault scenario (one shard slow, then healed)",
                                 command: [@config.environment, "bench/resilience/fault"].reject(&:empty?).join(" "))
      [setup, verdict, summaries, charts, per_second, changes, load_shape].flatten.each { |section| report.paragraph(section) }
      report.write(path)
    end

    private

    # @return [Array<Second>] the run cut into seconds of its timeline
    def seconds(run)
      t0 = run[:t0]
      # By wall-clock second; JSON made the seconds keys.
      arrivals = run[:arrivals].to_h { |second, count| [Integer(second.to_s), count] }
      bins = Array.new(@config.duration) do |t|
        Second.new(t: t, phase: @config.phase(t), latencies: [], statuses: [], server: [], letters: [], others: 0,
                   arrivals: arrivals.fetch(t0 + t, 0), machine: run[:machine][t])
      end
      align(run).first.each do |request|
        bin = bins[(request.at - t0).floor] if request.at >= t0
        next unless bin
        bin.latencies << request.latency
        bin.statuses << request.status
      end
      run[:fanouts].each do |start, seconds, letters|
        bin = bins[(start - t0).floor] if start >= t0
        next unless bin
        bin.server << seconds
        bin.letters << letters[SLOW_SHARD]
        bin.others += letters.each_char.with_index.count { |letter, index| index != SLOW_SHARD && letter != "A" }
      end
      bins.each do |bin|
        bin.latencies.sort!
        bin.server.sort!
      end
    end

    # hey's start times are the driver's clock when it spawned each process plus hey's offset,
    # which counts from a moment some milliseconds later (the Go program's start), so they run
    # early by a different amount per process. Each request is paired with the app's record of
    # it (same process, the nearest start) and placed at that record's start.
    # @return [Array(Array<Request>, Array<Float>)] the requests, and each process's offset
    def align(run)
      (@aligned ||= {}.compare_by_identity)[run] ||= begin
        fanouts = run[:fanouts].group_by { |fanout| fanout[5] }.transform_values { |list| list.sort_by(&:first) }
        offsets = []
        requests = run[:requests].group_by { |request| request[3] }.flat_map do |worker, list|
          records = fanouts.fetch(worker, [])
          starts = records.map(&:first)
          # Requests of one process are 1/WORKER_RATE apart, so within a quarter of that the
          # nearest record is the request's own.
          window = 0.25 / @config.worker_rate
          offset = median(list.filter_map { |start, *| (index = nearest(starts, start, window)) && starts[index] - start })
          offsets << offset if offset
          list.map do |start, latency, status, _|
            index = offset && nearest(starts, start + offset, 0.02)
            Request.new(index ? starts[index] : start + (offset || 0), latency, status, index && records[index])
          end
        end
        [requests, offsets.sort]
      end
    end

    # @return [Integer, nil] the index of the value in `sorted` nearest to `value`, if within
    def nearest(sorted, value, within)
      after = sorted.bsearch_index { |x| x >= value } || sorted.size
      index = [after - 1, after].select { |i| i >= 0 && i < sorted.size }.min_by { |i| (sorted[i] - value).abs }
      index if index && (sorted[index] - value).abs <= within
    end

    def median(values)
      values.empty? ? nil : values.sort[values.size / 2]
    end

    def setup
      c = @config
      <<~TEXT
        Peer and load tool: semian #{gem_version('semian')}, hey #{`dpkg-query -W -f='${Version}' hey 2>/dev/null`.strip} (Debian).

        `uptime` before the run: `#{@uptime_before}`; after: `#{@uptime_after}`.#{shared_note}

        **Setup.** Four shard processes (`bench/resilience/fault_shard.ru`, each `weft serve -w 0` on a
        unix socket, answering after 1 ms) and the fan-out app (`bench/resilience/fault_app.ru`,
        `weft serve -w 0` on TCP), all on this machine, started afresh for each variant. A request to
        the app calls the 4 shards at once with `Weft.scatter` under a #{ms(c.deadline)} deadline, each
        call wrapped in the variant's breaker; a shard that failed, was late or was refused gets a
        marker. The app records, per request, the scatter's duration and each shard's outcome.

        **Load.** `hey` (the Debian package): #{c.workers} processes × 1 worker × `-q #{num(c.worker_rate)}`,
        their ticks planned #{ms(1 / c.rate)} apart: #{num(c.rate)} requests/s, keep-alive. A worker waits
        #{ms(1 / c.worker_rate)} between requests, ten times the #{ms(c.deadline)} a fan-out takes at worst, so a
        slow answer never makes a worker skip a tick: the load is open-loop, the rate does not fall
        when the app slows down (the achieved rate per second is in the tables). One worker per
        process because the workers of one hey process tick in step, in bursts. The breakers are
        replaced by new ones at the end of the warm-up, so that the cold start does not count.

        **Phases** (seconds of each variant's #{c.duration} s of load): warm-up 0–#{c.warmup}, healthy
        #{c.warmup}–#{c.slow_seconds.begin}, shard #{SLOW_SHARD} slow (#{num(c.slow_delay)} s per answer)
        #{c.slow_seconds.begin}–#{c.slow_seconds.end}, healed #{c.slow_seconds.end}–#{c.duration}.

        **Breakers** (one per shard):

        * Weft: `#{inspect_options(BREAKERS['weft'])}`.
        * Semian: `#{inspect_options(BREAKERS['semian'])}, bulkhead: false, exceptions: [StandardError]`.
          Semian has no slow-call rate: the deadline's error is its failure signal, and
          `half_open_resource_timeout` gives a half-open call a 25 ms deadline (Semian hands it to the
          resource's `with_resource_timeout`, here `Weft.deadline`).
        * deadline only: no breaker; every call to the slow shard runs into the deadline.
      TEXT
    end

    def shared_note
      load = @uptime_before[/load average: ([\d.]+)/, 1].to_f
      # The benchmark's own share of the machine: its processes' CPU time over the time they ran.
      cpu = @runs.sum { |run| run[:app_cpu] + run[:shards_cpu] + run[:hey_cpu] }
      wall = @runs.size * (@config.duration + SPAWN_SPREAD / @config.worker_rate)
      busy = "the \"machine busy\" column of the per-second tables shows how busy the machine was, this " \
             "benchmark included (its processes kept #{percent(cpu / wall / Etc.nprocessors)} of the " \
             "#{Etc.nprocessors} cores busy)"
      if load >= 1
        " The machine was shared with other jobs (a 1-minute load of #{load} on #{Etc.nprocessors} cores before " \
          "the run started); #{busy}."
      else
        " A 1-minute load of #{load} before the run: little else was running; #{busy}."
      end
    end

    def verdict
      header = ["variant", "p99 over the slow phase", "worst p99 of one second", "requests over #{ms(@limit)}",
                "every second's p99 within"]
      sections = ["## Verdict: p99 ≤ deadline + 10 ms (#{ms(@limit)}) while the shard is slow"]
      if @rounds.size > 1
        sections << "Every round (the rest of this page details round 1; the load average is the machine's " \
                    "just before the variant ran):"
        sections << table(["round", *header, "load average"], @rounds.flat_map do |runs|
          runs.map { |run| [run[:round], *verdict_row(run), run[:load_before]] }
        end)
      else
        sections << table(header, @runs.map { |run| verdict_row(run) })
      end
      sections + @runs.filter_map { |run| late_requests(run) }
    end

    def verdict_row(run)
      slow = seconds(run).select { |second| second.phase == "slow" }
      latencies = slow.flat_map(&:latencies).sort
      worst = slow.max_by { |second| pct(second.latencies, 0.99) || 0 }
      worst_p99 = pct(worst.latencies, 0.99)
      over = latencies.count { |latency| latency > @limit }
      [LABELS.fetch(run[:variant]), ms(pct(latencies, 0.99)), "#{ms(worst_p99)} (second #{worst.t})",
       "#{over} of #{latencies.size}", worst_p99 <= @limit ? "**yes**" : "**no**"]
    end

    # Where the slow phase's late requests lost their time, from the app's record of each.
    def late_requests(run)
      slow = (run[:t0] + @config.slow_seconds.begin)...(run[:t0] + @config.slow_seconds.end)
      late = align(run).first.select { |request| slow.cover?(request.at) && request.latency > @limit }
      return if late.empty?
      paired = late.select(&:fanout)
      inside = paired.select { |request| request.fanout[1] > @limit }
      outside = paired - inside
      text = "**#{LABELS.fetch(run[:variant])}**: #{late.size} requests over #{ms(@limit)} in the slow phase"
      unless inside.empty?
        waited = inside.count { |request| request.fanout[4] >= CPU_WAIT }
        collected = inside.count { |request| request.fanout[3].positive? }
        text += ". Late inside the scatter: #{inside.size} (the app's thread waited #{ms(CPU_WAIT)} or more for a " \
                "CPU during #{waited} of these, a garbage collection ran during #{collected})"
      end
      unless outside.empty?
        lost = outside.map { |request| request.latency - request.fanout[1] }.sort
        text += ". Scatter within #{ms(@limit)}, the rest lost outside it (#{ms(lost.first)} to #{ms(lost.last)}, in " \
                "the app's server before or after the handler, in the kernel, or in hey): #{outside.size}"
      end
      text += ". Not paired with the app's record: #{late.size - paired.size}" if paired.size < late.size
      busiest = phase_seconds(run[:variant], "slow").select { |second| (pct(second.latencies, 0.99) || 0) > @limit }
      unless busiest.empty?
        text += ". Seconds whose p99 was over: " + busiest.map do |second|
          format("%d (p99 %s; the app's thread waited %s for a CPU in that second, the machine was %s busy)",
                 second.t, ms(pct(second.latencies, 0.99)), ms(second.machine[:app_wait]), percent(second.machine[:busy]))
        end.join("; ")
      end
      "#{text}."
    end

    def summaries
      rows = @runs.flat_map do |run|
        PHASES.filter_map do |phase|
          seconds = phase_seconds(run[:variant], phase)
          next if seconds.empty?
          latencies = seconds.flat_map(&:latencies).sort
          server = seconds.flat_map(&:server).sort
          outcomes = seconds.flat_map(&:letters).tally
          range = (run[:t0] + seconds.first.t)...(run[:t0] + seconds.last.t + 1)
          outside = align(run).first.select { |request| request.fanout && range.cover?(request.at) }
                              .map { |request| request.latency - request.fanout[1] }.sort
          [LABELS.fetch(run[:variant]), phase, latencies.size, ms(pct(latencies, 0.5)), ms(pct(latencies, 0.99)),
           ms(pct(latencies, 0.999)), ms(latencies.last), ms(pct(server, 0.99)),
           "#{ms(pct(outside, 0.5))} / #{ms(pct(outside, 0.99))}", percent(self.class.admitted(outcomes)),
           LETTERS.map { |letter| outcomes.fetch(letter, 0) }.join(" / "), seconds.sum(&:others)]
        end
      end
      cpu = @runs.map do |run|
        format("%s: the app %.1f s (%d garbage collections, %d major, %d ms in all), the shards %.1f s, hey %.1f s " \
               "(load average after: %s)", LABELS.fetch(run[:variant]), run[:app_cpu], run[:gc][:count],
               run[:gc][:major_gc_count], run[:gc][:time], run[:shards_cpu], run[:hey_cpu], run[:loadavg])
      end
      ["## By phase",
       <<~TEXT.strip,
         Latency is the fan-out's as hey measured it (request written to response read, over loopback
         TCP); "app p99" is the scatter alone, timed inside the app; "outside" is a request's latency
         less its scatter's (the app's server, the kernel and hey). Calls to shard #{SLOW_SHARD}:
         A answered, F ran and failed (the deadline passed), R refused by the breaker, C cancelled by
         the scatter before the call saw its own deadline (so the breaker did not count it), N not run:
         the deadline passed before the call's task started (the app was kept from running for the
         whole deadline). "admitted" is (A + F + C) / (A + F + C + R). The last column counts the calls
         to the three healthy shards that were not answered.
       TEXT
       table(["variant", "phase", "requests", "p50", "p99", "p99.9", "max", "app p99", "outside p50 / p99",
              "shard #{SLOW_SHARD} admitted",
              "shard #{SLOW_SHARD} A / F / R / C / N", "other shards not A"], rows),
       "CPU used while the load ran (#{@config.duration} s, and hey's start before it, on #{Etc.nprocessors} cores): " \
       "#{cpu.join('; ')}."]
    end

    def charts
      sections = ["## Charts", <<~TEXT.strip]
        One column per second; the ruler under each chart marks the phases (w warm-up, h healthy,
        S shard #{SLOW_SHARD} slow, r healed) and every fifth second.
      TEXT
      @runs.each do |run|
        values = @seconds.fetch(run[:variant]).map { |second| pct(second.latencies, 0.99)&.*(1000) }
        sections << "p99 of the fan-out per second, ms, #{LABELS.fetch(run[:variant])} (◀ the limit, " \
                    "#{ms(@limit)}; ▲ off the chart)\n\n" \
                    "```\n#{column_chart(values, step: 10, rows: 9, mark: (@limit * 1000).round(6))}\n```"
      end
      @runs.each do |run|
        next if run[:variant] == "deadline"
        values = @seconds.fetch(run[:variant]).map { |second| second.admitted&.*(100) }
        sections << "calls to shard #{SLOW_SHARD} admitted per second, %, #{LABELS.fetch(run[:variant])}\n\n" \
                    "```\n#{column_chart(values, step: 10, rows: 10)}\n```"
      end
      sections
    end

    def per_second
      sections = ["## Per second", <<~TEXT.strip]
        sent: requests hey started in that second and got an answer to (hey's CSV has no row for a
        request that failed); served: fan-outs the app ran. admitted: the share of calls to shard
        #{SLOW_SHARD} the breaker let run; shard saw: the requests shard #{SLOW_SHARD} itself received. app
        off-CPU: how long the app's thread was runnable but waiting for a CPU; machine busy: the share
        of both cores in use, by anything.
      TEXT
      @runs.each do |run|
        breaker = run[:variant] != "deadline"
        header = ["s", "phase", "sent/served", "p50", "p99", "max", "app p99"]
        header += ["admitted", "shard saw"] if breaker
        header += ["app off-CPU", "machine busy"]
        rows = @seconds.fetch(run[:variant]).map do |second|
          errors = second.errors.positive? ? " (#{second.errors} not 200)" : ""
          row = [second.t, second.phase, "#{second.sent}/#{second.served}#{errors}", ms(pct(second.latencies, 0.5)),
                 ms(pct(second.latencies, 0.99)), ms(second.latencies.last), ms(pct(second.server, 0.99))]
          row += [percent(second.admitted), second.arrivals] if breaker
          row + [ms(second.machine[:app_wait]), percent(second.machine[:busy])]
        end
        sections << "### #{LABELS.fetch(run[:variant])}" << table(header, rows)
      end
      sections
    end

    def changes
      lines = @runs.filter_map do |run|
        next if run[:variant] == "deadline"
        warm, measured = run[:changes].partition { |_, _, _, generation| generation.zero? }
        list = measured.map { |at, name, state, _| "#{format('%.2f', at - run[:t0])} s #{name} #{state}" }
        warm_note = warm.empty? ? "" : " (and #{warm.size} during the warm-up, before the breakers were replaced)"
        "* #{LABELS.fetch(run[:variant])}: #{list.empty? ? 'none' : list.join(', ')}#{warm_note}"
      end
      return [] if lines.empty?
      ["## Breaker state changes (seconds on the timeline)", lines.join("\n")]
    end

    # The rate and spacing of the load, over each variant's timeline.
    def load_shape
      rows = @runs.map do |run|
        seconds = @seconds.fetch(run[:variant])
        sent = seconds.map(&:sent)
        served = seconds.map(&:served)
        timeline = run[:t0]...(run[:t0] + @config.duration)
        gaps = run[:fanouts].map(&:first).select { |start| timeline.cover?(start) }.sort.each_cons(2).map { |a, b| b - a }.sort
        requests, offsets = align(run)
        [LABELS.fetch(run[:variant]), sent.sum, "#{sent.min}–#{sent.max}", served.sum, "#{served.min}–#{served.max}",
         ms(pct(gaps, 0.01)), ms(pct(gaps, 0.5)), ms(pct(gaps, 0.99)), ms(gaps.last),
         "#{requests.count(&:fanout)} of #{requests.size}", "#{ms(offsets.first)} – #{ms(offsets.last)}"]
      end
      ["## The load",
       <<~TEXT.strip,
         Requests hey sent and got an answer to, and fan-outs the app started, in all and in the
         lowest and highest second; the gaps between consecutive fan-outs as the app saw them
         arrive (#{ms(1 / @config.rate)} if perfectly even). A hey process's ticks count from its
         start, and a Go program takes a different few milliseconds to start each time (tens on a
         busy machine), so the processes' phases drift from the plan and the spacing is uneven:
         a fixed pattern with some requests arriving together, repeating every
         #{ms(1 / @config.worker_rate)} whatever the app does. Each of hey's requests is paired with the
         app's record of it (by hey process and time) and binned by when the app started it; the
         last column is, over the hey processes, how much earlier hey's own account put its
         requests (the process's start as the driver saw it, plus hey's offsets).
       TEXT
       table(["variant", "sent", "sent per second", "served", "served per second", "gap p1", "gap p50", "gap p99",
              "gap max", "paired", "hey's times early by"], rows)]
    end

    def phase_seconds(variant, phase)
      @seconds.fetch(variant).select { |second| second.phase == phase }
    end

    # A column chart, one column (two characters) per value, `rows` rows of `step` each, drawn
    # with eighth blocks. nil values are left blank; values above the top get ▲.
    def column_chart(values, step:, rows:, mark: nil)
      top = step * rows
      lines = rows.downto(1).map do |row|
        floor = (row - 1) * step
        cells = values.map do |value|
          next "  " if value.nil?
          next "▲▲" if value > top && row == rows
          BLOCKS[((value - floor) / step * 8).round.clamp(0, 8)] * 2
        end
        marker = mark && mark > floor && mark <= row * step ? " ◀ #{format('%g', mark.round(1))}" : ""
        "#{format('%4d', row * step)} ┤#{cells.join}#{marker}"
      end
      ruler = values.each_index.map { |t| PHASE_MARKS.fetch(@config.phase(t)) * 2 }.join
      ticks = values.each_index.select { |t| (t % 5).zero? }.map { |t| t.to_s.ljust(10) }.join
      (lines + ["     └#{'─' * (values.size * 2)}", "      #{ruler}", "      #{ticks}"]).join("\n")
    end

    def table(header, rows)
      lines = ["| #{header.join(' | ')} |", "|#{header.map { '---' }.join('|')}|"]
      rows.each { |row| lines << "| #{row.join(' | ')} |" }
      lines.join("\n")
    end

    def pct(sorted, share)
      self.class.percentile(sorted, share)
    end

    def ms(seconds)
      return "-" if seconds.nil?
      milliseconds = seconds * 1000
      milliseconds >= 100 ? format("%.0f ms", milliseconds) : format("%.1f ms", milliseconds)
    end

    def percent(share)
      share.nil? ? "-" : format("%.0f%%", share * 100)
    end

    def num(value)
      value == value.round ? value.round.to_s : value.to_s
    end

    def inspect_options(options)
      options.map { |key, value| "#{key}: #{value.inspect}" }.join(", ")
    end

    def gem_version(name)
      Gem::Specification.find_by_name(name).version.to_s
    rescue Gem::MissingSpecError
      "?"
    end
  end
end
