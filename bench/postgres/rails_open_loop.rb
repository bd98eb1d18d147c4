# frozen_string_literal: true

require "fileutils"
require_relative "../support/jmeter"
require_relative "../support/open_loop_window"

module PostgresBench
  # The open-loop half of bench/postgres/rails_bench.rb: the Rails app's request from JMeter at
  # fixed rates (bench/support/open_loop.jmx, through bench/support/jmeter.rb), and its part of
  # the report. Each request is what rails_post.lua makes wrk send: POST /authors/<random
  # author>/posts with a title no other request used, so the uniqueness validation passes.
  module RailsOpenLoop
    # Seconds measured at each rate come from the command line; these are the rest.
    # Rates in requests/s, rising (BENCH_RATES); the ceiling is 100 (5 connections / 0.05 s).
    RATES = ENV.fetch("BENCH_RATES", "20,40,60,70,80,90").split(",").map { |rate| Integer(rate) }.freeze
    # Seconds left out once every JMeter thread runs: the schedule settles only after the
    # threads' first requests (see bench/support/open_loop.jmx).
    WARMUP = 10
    # Seconds of latency JMeter's threads absorb (threads = rate × HEADROOM): beyond it a slot
    # finds no free thread and is skipped, which shows as an achieved rate below the offered one.
    HEADROOM = 4
    # An answer later than this is a timeout.
    TIMEOUT_MS = 15_000
    # The app's answer to a new post.
    CREATED = 201
    TMP = File.join(ROOT, "tmp", "bench_rails")

    # One rate on one server: the measured window (Bench::OpenLoopWindow), the most client
    # backends of the server's database seen during the rate, and the 1-minute load average
    # when the rate started (the machine is shared: other jobs show there).
    Step = Struct.new(:rate, :window, :backends, :load_before)

    module_function

    # JMeter at `rate` against the app on `port` for its threads' start, WARMUP and `seconds`.
    # @param name [String] the server's name, for the files of this run (in TMP)
    # @return [Bench::OpenLoopWindow] the `seconds` measured
    def run_rate(jmeter, name, port, rate, seconds, authors:)
      threads = Bench::JMeter.threads(rate, HEADROOM).sum
      duration = Bench::JMeter.startup_seconds(threads) + HEADROOM + WARMUP + seconds
      FileUtils.mkdir_p(TMP)
      prefix = File.join(TMP, "#{name}-#{rate}")
      requests = write_requests("#{prefix}.tsv", rate, (Bench::JMeter.schedules(rate).last * duration * 1.2).ceil + threads, authors)
      request = Bench::JMeter::Request.new(port: port, method: "POST", content_type: "application/x-www-form-urlencoded",
                                           file: requests, columns: %w[path body])
      result = jmeter.run(rate: rate, seconds: duration, headroom: HEADROOM, ramp_seconds: HEADROOM, request: request,
                          timeout_ms: TIMEOUT_MS, log_prefix: prefix)
      Bench::OpenLoopWindow.new(result, warmup: WARMUP, seconds: seconds)
    end

    # Writes `count` requests, more than JMeter sends in a run (it would start the file again,
    # and a title sent twice to the same author fails the validation). Random authors from a
    # seed of the rate's, so every server gets the same sequence.
    # @return [String] the path
    def write_requests(path, rate, count, authors)
      random = Random.new(rate)
      File.open(path, "w") do |file|
        count.times { |number| file.puts("/authors/#{random.rand(1..authors)}/posts\ttitle=open-#{rate}-#{number}") }
      end
      path
    end

    # @return [Float] the 1-minute load average now
    def load_average
      File.read("/proc/loadavg").split.first.to_f
    end

    # The report's open-loop part: how the load was made, every rate on every server side by
    # side, p99 against rate with the peers' ratios, and a chart.
    # @param steps [Hash{String=>Array<Step>}] per server name, one Step a rate
    # @param label [Proc] a server name's label
    def report(page, names, steps, seconds, label)
      weft = steps["weft"]
      page.paragraph(<<~TEXT)
        ## Open loop: fixed rates from JMeter, #{seconds} s each

        JMeter #{Bench::JMeter.version} (Debian, non-GUI, on #{Bench::JMeter.java_version}) runs `bench/support/open_loop.jmx`, the plan bench/ringpool uses too,
        with the Rails app's request (bench/postgres/rails_open_loop.rb): POST /authors/<random one of #{RailsBench::AUTHORS}>/posts,
        `title=` a title no other request used. Its thread groups send on fixed schedules (a Constant Throughput Timer
        shared by each group's threads), so requests keep coming at the rate whatever the latency of those before them: a
        server that falls behind gets a queue, not a slower load. There are rate × #{HEADROOM} s threads, each with a keep-alive
        connection, started evenly over #{HEADROOM} s: with more than #{HEADROOM} s of latency a slot finds no free thread and is
        skipped, which shows as an achieved rate below the offered one (the queue stops growing there). JMeter 2.13's timer sends a
        request up to its thread's previous latency before its slot (see bench/support/open_loop.jmx), so the spacing jitters:
        "sends per 100 ms" shows how evenly they left (#{RATES.first} req/s is #{format('%g', RATES.first / 10.0)} per 100 ms). Each rate: JMeter starts, its threads start,
        #{WARMUP} s of warm-up, then #{seconds} s measured; a request counts at the rate it was sent at. Latency: JMeter's, from the
        send to the answer's last byte, whole milliseconds; nearest-rank percentiles of every request sent in the window,
        answered or not. Errors: answers other than #{CREATED}, and connections that failed. Timeouts: no answer within
        #{TIMEOUT_MS / 1000} s. The rates run from low to high on the same server process, after the closed loop, each once the
        app's database has had no statement running for 0.5 s. Backends: as in the closed loop, per rate. Load before: the
        machine's 1-minute load average as the rate started (#{Etc.nprocessors} cores; the previous rate's work is in it, other
        jobs on the machine too).
      TEXT
      rows = RATES.flat_map do |rate|
        names.map do |name|
          step = steps[name].find { |each| each.rate == rate }
          w = step.window
          [rate, label.call(name), format("%.1f", w.achieved), *[0.5, 0.9, 0.99].map { |share| w.percentile(share) }, w.max,
           w.errors(CREATED), w.timeouts, step.backends, w.sends_per_100ms.join(" / "), format("%.2f", step.load_before)]
        end
      end
      page.table(["offered req/s", "server", "achieved req/s", "p50 ms", "p90 ms", "p99 ms", "max ms", "errors", "timeouts",
                  "backends (max)", "sends per 100 ms (min / median / max)", "load before"], rows)
      p99 = ->(name, rate) { steps[name].find { |step| step.rate == rate }.window.percentile(0.99) }
      peers = names - ["weft"]
      ratio_header = weft ? peers.map { |name| "#{label.call(name)} / Weft" } : []
      page.paragraph("p99 (ms) against the offered rate#{', and each peer\'s p99 over Weft\'s (above 1: Weft\'s is lower)' if weft}:")
      page.table(["offered req/s", *names.map { |name| label.call(name) }, *ratio_header],
                 RATES.map do |rate|
                   ratios = weft ? peers.map { |name| format("%.2fx", p99.call(name, rate).fdiv(p99.call("weft", rate))) } : []
                   [rate, *names.map { |name| p99.call(name, rate) }, *ratios]
                 end)
      page.paragraph("Highest offered rate held (at least 95% of it achieved, no error or timeout, p99 under 1 s): " +
                     names.map { |name| "#{label.call(name)} #{held(steps[name]) || 'none'}" }.join(", ") + ".")
      page.chart("p99 (ms) against the offered rate (req/s):",
                 names.flat_map { |name| steps[name].map { |step| ["#{label.call(name)} @ #{step.rate}", step.window.percentile(0.99).to_f] } },
                 format: "%.0f")
    end

    # @return [Integer, nil] the highest rate whose step held: most of the rate achieved, no
    #   failed request, p99 under a second
    def held(steps)
      steps.select do |step|
        w = step.window
        w.achieved >= 0.95 * w.offered && w.errors(CREATED).zero? && w.timeouts.zero? && w.percentile(0.99) < 1000
      end.map(&:rate).max
    end
  end
end
