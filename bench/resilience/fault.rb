# frozen_string_literal: true

# The fault scenario of issue #8, benchmark (b): a fan-out app under `weft serve` asks 4 upstream
# shards at once under a 50 ms deadline; under constant, open-loop load one shard turns slow
# (2 s per answer) for a while and then heals. Run through bench/resilience/fault, which writes
# bench/results/resilience_fault.md.
#
# Per variant (Weft's breaker, Semian's breaker, the deadline alone) it starts 4 shard processes
# (bench/resilience/fault_shard.ru) and the fan-out app (bench/resilience/fault_app.ru), each
# under `weft serve -w 0`, sets the fault window on shard 2, and drives the app with `hey` at a
# fixed rate. hey's -q paces each of its workers with a ticker, and the workers of one hey
# process tick in step (a burst of c requests every 1/q seconds), so the load is
# RATE / WORKER_RATE hey processes of one worker each, their ticks planned 1/RATE seconds apart
# (how evenly they land depends on how long each Go program takes to start; the report shows
# the spacing the app saw). A worker's interval (1/WORKER_RATE, 0.5 s) is ten times the slowest
# answer expected (the 50 ms deadline), so a slow answer never holds a worker past its next
# tick: the rate does not fall when the app slows down (open loop). The report shows the
# achieved rate per second.
#
# Environment (seconds unless said): RATE (100 requests/s), WORKER_RATE (2 requests/s per hey
# process), WARMUP (3), HEALTHY (6), SLOW (10), HEALED (12), DEADLINE (0.05), SLOW_DELAY (2),
# VARIANTS (weft,semian,deadline), ROUNDS (1: each round runs every variant, the first of them
# in turn), OUT (bench/results/resilience_fault.md).
require_relative "../support/bundle"
require "json"
require "socket"
require "etc"
require "fileutils"
require "rbconfig"
require "timeout"
require_relative "../../lib/weft/http"
require_relative "fault_report"
require_relative "../support/ports"
require_relative "../support/processes"

module FaultBench
  ROOT = File.expand_path("../..", __dir__)
  TMP = File.join(ROOT, "tmp", "bench_resilience_fault")
  SHARDS = 4
  SLOW_SHARD = 2
  # hey processes start over this many worker intervals before the timeline (see Run#run_hey).
  SPAWN_SPREAD = 5

  # The breakers, tuned so that a whole cycle fits in a run of a minute. Both open after 20
  # failures when every call fails (Weft: half of its last 40 calls; Semian: 20 errors within
  # 2 s), 0.2 s into the fault at 100 requests/s, yet not on one stall of the machine (a 50 ms
  # stall fails 5 to 10 calls). Both stay open 2 s and count a call slower than 25 ms against
  # the shard (Weft: slow_call; Semian has no slow-call rate, so the deadline's error is its
  # failure signal, and a half-open call gets a 25 ms timeout). Weft then ramps over 6 s (2 s
  # per step) and judges each step after 5 outcomes; Semian goes half-open, lets every call
  # through, and closes after 5 successes or opens again on the first failure.
  BREAKERS = {
    "weft" => { slow_call: 0.025, window_calls: 40, minimum_calls: 20, failure_rate: 0.5, slow_rate: 0.5,
                open_for: 2, ramp: [0.05, 0.25, 0.5], ramp_for: 6, ramp_minimum_calls: 5 },
    "semian" => { error_threshold: 20, error_threshold_timeout: 2, error_timeout: 2, success_threshold: 5,
                  half_open_resource_timeout: 0.025 },
    "deadline" => {}
  }.freeze
  LABELS = { "weft" => "Weft::CircuitBreaker", "semian" => "Semian #{Gem.loaded_specs.fetch('semian').version}", "deadline" => "deadline only" }.freeze

  # The run's settings, from the environment.
  class Config
    attr_reader :rate, :worker_rate, :workers, :warmup, :healthy, :slow, :healed, :deadline, :slow_delay, :variants,
                :rounds, :out

    def initialize(env = ENV)
      @worker_rate = Float(env.fetch("WORKER_RATE", "2"))
      @workers = (Float(env.fetch("RATE", "100")) / @worker_rate).round
      raise ArgumentError, "RATE must be at least WORKER_RATE" if @workers < 1
      @rate = @workers * @worker_rate
      @warmup = Integer(env.fetch("WARMUP", "3"))
      @healthy = Integer(env.fetch("HEALTHY", "6"))
      @slow = Integer(env.fetch("SLOW", "10"))
      @healed = Integer(env.fetch("HEALED", "12"))
      @deadline = Float(env.fetch("DEADLINE", "0.05"))
      @slow_delay = Float(env.fetch("SLOW_DELAY", "2"))
      unless [@warmup, @healthy, @healed].all? { |seconds| seconds >= 0 } && @slow >= 1
        raise ArgumentError, "WARMUP, HEALTHY and HEALED must be 0 or more, SLOW 1 or more"
      end
      @variants = env.fetch("VARIANTS", "weft,semian,deadline").split(",")
      unknown = @variants - BREAKERS.keys
      raise ArgumentError, "unknown VARIANTS #{unknown.join(', ')} (known: #{BREAKERS.keys.join(', ')})" unless unknown.empty?
      @rounds = Integer(env.fetch("ROUNDS", "1"))
      raise ArgumentError, "ROUNDS must be at least 1" if @rounds < 1
      @out = File.expand_path(env.fetch("OUT", "bench/results/resilience_fault.md"), ROOT)
    end

    # @return [Integer] seconds of load per variant
    def duration
      @warmup + @healthy + @slow + @healed
    end

    # @return [Range] the seconds of the timeline during which the shard is slow
    def slow_seconds
      (@warmup + @healthy)...(@warmup + @healthy + @slow)
    end

    # @return [String] the phase of second `t` of the timeline
    def phase(t)
      if t < @warmup then "warm-up"
      elsif t < slow_seconds.begin then "healthy"
      elsif t < slow_seconds.end then "slow"
      else "healed"
      end
    end

    # @return [String] the settings that differ from the defaults, for the report's command line
    def environment
      %w[RATE WORKER_RATE WARMUP HEALTHY SLOW HEALED DEADLINE SLOW_DELAY VARIANTS ROUNDS].filter_map do |name|
        "#{name}=#{ENV[name]}" if ENV[name]
      end.join(" ")
    end
  end

  # Server and hey processes: spawned in their own process groups, stopped by group
  # (Bench::Processes.stop).
  module Processes
    module_function

    def now
      Process.clock_gettime(Process::CLOCK_REALTIME)
    end

    # @return [Integer] pid
    def serve(rackup, bind, log, env)
      Process.spawn(env, RbConfig.ruby, File.join(ROOT, "exe/weft"), "serve", rackup, "-w", "0", "-b", bind, "-q",
                    chdir: ROOT, out: log, err: log, pgroup: true)
    end

    # Waits until `connect` succeeds (the server listens) or 30 s have passed.
    def await(pid, log, &connect)
      limit = now + 30
      begin
        connect.call.close
      rescue SystemCallError
        raise "server #{pid} did not start in 30 s; see #{log}" if now > limit
        raise "server #{pid} exited at start; see #{log}:\n#{File.read(log)[-2000..]}" if Process.waitpid(pid, Process::WNOHANG)
        sleep 0.05
        retry
      end
    end

    # @return [Float] CPU seconds (user + system) the process has used so far
    def cpu_seconds(pid)
      fields = File.read("/proc/#{pid}/stat").split(") ").last.split
      (Integer(fields[11]) + Integer(fields[12])).to_f / Etc.sysconf(Etc::SC_CLK_TCK)
    end

    # @return [Float] seconds the process's main thread has waited, runnable, for a CPU
    def run_delay(pid)
      File.read("/proc/#{pid}/schedstat").split[1].to_i / 1e9
    end
  end

  # One variant's run: processes up, fault set, load, results collected, processes down.
  class Run
    def initialize(config, variant, round)
      @config = config
      @variant = variant
      @round = round
      @dir = File.join(TMP, "round#{round}-#{variant}")
      @pids = []
    end

    # Writes what FaultReport needs to run.json in the run's folder: the timeline's start, hey's
    # requests, the app's fan-outs and breaker changes, the slow shard's arrivals, CPU use.
    def call
      FileUtils.rm_rf(@dir)
      FileUtils.mkdir_p(@dir)
      load_before = File.read("/proc/loadavg").split.first.to_f
      sockets = start_servers
      # A whole second, so the bins match the shards' by-second counts.
      t0 = (Processes.now + 1 + SPAWN_SPREAD / @config.worker_rate).ceil
      slow_from = t0 + @config.slow_seconds.begin
      control("unix://#{sockets[SLOW_SHARD]}", :post, "/fault",
              query: { from: slow_from, until: slow_from + @config.slow, delay: @config.slow_delay })
      cpu_before = cpu_seconds
      children_before = Process.times
      sampler = Thread.new { sample_machine(t0) }
      requests = run_hey(t0) do
        # The end of the warm-up: the breakers start afresh (the cold start may have tripped them).
        sleep([t0 + @config.warmup - Processes.now, 0].max)
        control(app_url, :post, "/reset")
      end
      machine = sampler.value
      children = Process.times
      app = JSON.parse(control(app_url, :get, "/report"))
      arrivals = JSON.parse(control("unix://#{sockets[SLOW_SHARD]}", :get, "/arrivals"))
      cpu_after = cpu_seconds
      result = {
        variant: @variant, round: @round, load_before: load_before, t0: t0, requests: requests,
        fanouts: app.fetch("fanouts"), changes: app.fetch("changes"), gc: app.fetch("gc"), arrivals: arrivals,
        machine: machine, app_cpu: cpu_after[0] - cpu_before[0], shards_cpu: cpu_after[1] - cpu_before[1],
        hey_cpu: children.cutime + children.cstime - children_before.cutime - children_before.cstime,
        loadavg: File.read("/proc/loadavg").split.first(3).join(" ")
      }
      File.write(File.join(@dir, "run.json"), JSON.generate(result))
    ensure
      sampler&.kill
      @pids.each { |pid| Bench::Processes.stop(pid) }
    end

    private

    # Samples, at every whole second of the timeline, the machine's busy CPU time and the time
    # the app's and the shards' reactor threads have spent waiting for a CPU, so the report can
    # tell, per second, how busy the machine was and how long the app was kept off the CPU.
    # @return [Array<Hash>] one entry per second: busy (share of all cores), app_wait and
    #   shards_wait (seconds)
    def sample_machine(t0)
      samples = (0..@config.duration).map do |t|
        sleep([t0 + t - Processes.now, 0].max)
        busy, total = Bench::Processes.machine_cpu
        { busy: busy, total: total, app: Processes.run_delay(@app), shards: (@pids - [@app]).sum { |pid| Processes.run_delay(pid) } }
      end
      samples.each_cons(2).map do |before, after|
        { busy: (after[:busy] - before[:busy]).fdiv(after[:total] - before[:total]),
          app_wait: after[:app] - before[:app], shards_wait: after[:shards] - before[:shards] }
      end
    end

    # @return [Array(Float, Float)] CPU seconds used so far by the app and by the 4 shards
    def cpu_seconds
      [Processes.cpu_seconds(@app), (@pids - [@app]).sum { |pid| Processes.cpu_seconds(pid) }]
    end

    def start_servers
      sockets = Array.new(SHARDS) { |index| File.join(@dir, "shard#{index}.sock") }
      shard_pids = sockets.each_with_index.map do |socket, index|
        log = File.join(@dir, "shard#{index}.log")
        [Processes.serve("bench/resilience/fault_shard.ru", "unix://#{socket}", log, {}), log]
      end
      @pids.concat(shard_pids.map(&:first))
      @port = Bench.free_port
      env = { "FAULT_VARIANT" => @variant, "FAULT_SHARDS" => sockets.join(","), "FAULT_DEADLINE" => @config.deadline.to_s,
              "FAULT_BREAKER" => JSON.generate(BREAKERS.fetch(@variant)) }
      app_log = File.join(@dir, "app.log")
      @app = Processes.serve("bench/resilience/fault_app.ru", "tcp://127.0.0.1:#{@port}", app_log, env)
      @pids << @app
      shard_pids.zip(sockets).each { |(pid, log), socket| Processes.await(pid, log) { UNIXSocket.new(socket) } }
      Processes.await(@app, app_log) { TCPSocket.new("127.0.0.1", @port) }
      sockets
    end

    def app_url
      "http://127.0.0.1:#{@port}"
    end

    # One control request (not load) to a shard or the app.
    # @return [String] the response's body
    def control(base_url, method, path, **options)
      client = Weft::HTTP::Client.new(base_url, deadline: 30)
      response = client.request(method, path, **options)
      raise "#{method.upcase} #{base_url}#{path}: #{response.status}" unless response.status < 300
      response.body
    ensure
      client&.close
    end

    # Starts the hey processes so that their ticks fall on t0, t0 + 1/RATE, ... modulo a
    # worker's interval: process k starts n_k intervals before its first tick in the timeline
    # (n_k from 1 to SPAWN_SPREAD), so that the processes' start-up, some 50 ms of CPU each,
    # is spread over a few seconds before t0 rather than crammed into one interval; the load
    # ramps up meanwhile. Calls the block (hey runs meanwhile) and waits for them all.
    # @return [Array<Array(Float, Float, Integer, Integer)>] per request: wall-clock start (as
    #   near as the process's start tells), seconds, status, hey process
    def run_hey(t0)
      interval = 1 / @config.worker_rate
      url = "http://127.0.0.1:#{@port}/"
      schedule = Array.new(@config.workers) do |index|
        early = 1 + (index % SPAWN_SPREAD)
        [t0 + index / @config.rate - early * interval, @config.duration + (early + 0.5) * interval, index]
      end
      running = []
      runs = schedule.sort.map do |start, seconds, index|
        sleep(start - Processes.now) if start > Processes.now
        csv = File.join(@dir, "hey#{index}.csv")
        # GOGC=off: a run allocates a few MB, and a collector in each of 50 processes costs CPU.
        # The header names the process to the app, which records it, so that the report can pair
        # each of hey's requests with the app's record of it.
        pid = Process.spawn({ "GOGC" => "off" }, "hey", "-c", "1", "-q", @config.worker_rate.to_s, "-z", "#{seconds}s",
                            "-t", "10", "-cpus", "1", "-H", "x-load-worker: #{index}", "-o", "csv", url,
                            out: csv, err: File.join(@dir, "hey#{index}.err"))
        running << pid
        # hey's offsets count from its start, some milliseconds after this (the report measures
        # how many by pairing the requests with the app's records).
        [Processes.now, csv, index]
      end
      yield
      Timeout.timeout(@config.duration + 60) do
        until running.empty?
          Process.wait(running.first)
          running.shift
        end
      end
      runs.flat_map { |started, csv, index| read_csv(csv, started, index) }
    ensure
      running&.each do |pid|
        Process.kill(:KILL, pid)
        Process.wait(pid)
      rescue SystemCallError
        nil
      end
    end

    # hey's CSV: response-time,DNS+dialup,DNS,Request-write,Response-delay,Response-read,status-code,offset
    def read_csv(path, started, worker)
      File.readlines(path).drop(1).map do |line|
        fields = line.split(",")
        [started + Float(fields[7]), Float(fields[0]), Integer(fields[6]), worker]
      end
    end
  end
end

if $PROGRAM_NAME == __FILE__
  config = FaultBench::Config.new
  # REPORT_ONLY=1 writes the report again from the raw data of the last run (tmp/), with the same
  # settings in the environment: for working on the report without running the load again.
  unless ENV["REPORT_ONLY"]
    abort "bench/resilience/fault needs hey (Debian package hey); bench/resilience/fault installs it" unless system("command -v hey >/dev/null")
    FileUtils.rm_rf(FaultBench::TMP)
    uptime = { before: `uptime`.strip }
    config.rounds.times do |round|
      # Each round starts with a different variant, so that none always meets the same moment.
      config.variants.rotate(round).each do |variant|
        warn "fault: round #{round + 1}, #{variant}: #{config.duration} s of load at #{config.rate.round} requests/s"
        FaultBench::Run.new(config, variant, round + 1).call
      end
    end
    uptime[:after] = `uptime`.strip
    File.write(File.join(FaultBench::TMP, "uptime.json"), JSON.generate(uptime))
  end
  read = ->(path) { JSON.parse(File.read(File.join(FaultBench::TMP, path)), symbolize_names: true) }
  rounds = Array.new(config.rounds) do |round|
    config.variants.rotate(round).map { |variant| read.call("round#{round + 1}-#{variant}/run.json") }
  end
  uptime = read.call("uptime.json")
  FaultBench::FaultReport.new(config, rounds, uptime_before: uptime[:before], uptime_after: uptime[:after]).write(config.out)
  warn "wrote #{config.out.delete_prefix("#{FaultBench::ROOT}/")}"
end
