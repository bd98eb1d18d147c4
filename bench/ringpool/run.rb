# frozen_string_literal: true

# The ringpool load test of issue #10; start it with bench/ringpool/run (which installs JMeter).
#
# 1. A private PostgreSQL (test/support/postgres_cluster.rb: its own data directory and port,
#    fsync off) and a database for ringpool.
# 2. ringpool under each of SERVERS in turn, each on a fresh database: `weft serve -C
#    apps/ringpool/config/weft.rb`, `puma -C apps/ringpool/config/puma.rb` and `falcon serve -c
#    apps/ringpool/config/any_server.ru`, SHARDS worker processes each (one shard per core by
#    default). Steps 3 to 5 run for each server.
# 3. POOLS ring pools through POST /ring_pools, sizes drawn log-uniformly from SIZES (many small
#    pools, a few large ones), every one with a LOCKOUT-second lockout; then the shards share
#    them out (ownership ticks).
# 4. BODIES request bodies of ITEMS items each, every item for a pool drawn with probability
#    proportional to its size (a customer sizes a pool to its traffic, so every number sees the
#    same demand and a pool overflows as the Erlang loss formula says for its size — see the
#    report's "expected exhausted" column), with tracking params that vary.
# 5. For each rate of RATES, then on by STEP_UP until a rate breaks: JMeter at that fixed rate
#    (open loop; see bench/ringpool/run and bench/support/open_loop.jmx), WARMUP seconds once every thread
#    runs, then STEP seconds measured: achieved rate, latency, errors, items by kind, CPU of the
#    server's processes, PostgreSQL's and JMeter's (from /proc).
# 6. bench/results/ringpool.md (OUT).
#
# A rate breaks when less than 90% of it is achieved, its p90 passes BREAK_P90 seconds, or more
# than 5% of its requests fail. Environment, with defaults:
#   RATES=25,50,100,150,200,250,500,1000,1500,2000  STEP_UP=500  MAX_RATE=4000  STEP=10  WARMUP=5
#   RAMP=3 (seconds over which JMeter starts its threads: with 0, every thread's first request
#   leaves at once, a burst of rate × HEADROOM requests that, with the JVM warming up beside it,
#   made the peers late for 1-2 s and opened their breakers for the next 11 s, measured window
#   included; see bench/results/ringpool-notes.md)
#   HEADROOM=0.5 (seconds of latency JMeter's threads absorb: threads = rate × HEADROOM)
#   POOLS=2000  SIZES=2-500  LOCKOUT=1  ITEMS=40  BODIES=5000  SEED=1
#   SHARDS=<cores>  SERVERS=weft,puma,falcon  PUMA_THREADS=32  BREAK_P90=1.0  TIMEOUT_MS=5000
#   OUT=bench/results/ringpool.md (ringpool-ruby-3.3.md on Ruby 3.3)
#   RINGPOOL_* settings (e.g. RINGPOOL_DEADLINE_MS) pass through to the app.
require_relative "../support/bundle"
require "etc"
require "fileutils"
require "json"
require "net/http"
require "pg"
require "rbconfig"
require "socket"
require "time"
require "timeout"
require_relative "../../apps/ringpool/lib/ringpool/gc_environment"
require_relative "../../test/support/postgres_cluster"
require_relative "procfs"
require_relative "jmeter"
require_relative "report"
require_relative "../support/ports"
require_relative "../support/processes"
require_relative "../support/results"

module RingpoolBench
  ROOT = File.expand_path("../..", __dir__)
  TMP = File.join(ROOT, "tmp", "bench_ringpool")
  # Ringpool::Ownership::LOCK_CLASS: a shard owns pool N while it holds advisory lock
  # (LOCK_CLASS, N). Read from pg_locks only to wait until the shards have shared the pools out.
  OWNERSHIP_LOCK_CLASS = 0x52494E48
  SOURCES = %w[google bing facebook email direct partner].freeze

  # The run's settings, from the environment.
  class Config
    attr_reader :rates, :step_up, :max_rate, :step, :warmup, :ramp, :headroom, :pools, :sizes, :lockout, :items, :bodies,
                :seed, :shards, :servers, :break_p90, :timeout_ms, :out

    def initialize(env = ENV)
      @rates = env.fetch("RATES", "25,50,100,150,200,250,500,1000,1500,2000").split(",").map { |rate| Integer(rate) }
      @step_up = Integer(env.fetch("STEP_UP", "500"))
      @max_rate = Integer(env.fetch("MAX_RATE", (JMeter::GROUPS * 1000).to_s))
      @step = Integer(env.fetch("STEP", "10"))
      @warmup = Integer(env.fetch("WARMUP", "5"))
      @ramp = Integer(env.fetch("RAMP", "3"))
      @headroom = Float(env.fetch("HEADROOM", "0.5"))
      @pools = Integer(env.fetch("POOLS", "2000"))
      @sizes = Range.new(*env.fetch("SIZES", "2-500").split("-", 2).map { |size| Integer(size) })
      @lockout = Integer(env.fetch("LOCKOUT", "1"))
      @items = Integer(env.fetch("ITEMS", "40"))
      @bodies = Integer(env.fetch("BODIES", "5000"))
      @seed = Integer(env.fetch("SEED", "1"))
      @shards = Integer(env.fetch("SHARDS", Etc.nprocessors.to_s))
      @servers = env.fetch("SERVERS", "weft,puma,falcon").split(",")
      @break_p90 = Float(env.fetch("BREAK_P90", "1.0"))
      @timeout_ms = Integer(env.fetch("TIMEOUT_MS", "5000"))
      @out = File.expand_path(env.fetch("OUT", Bench::Results.path("ringpool")), ROOT)
      validate
    end

    # @return [String] the settings that differ from the defaults, for the report's command line
    def environment
      %w[RATES STEP_UP MAX_RATE STEP WARMUP RAMP HEADROOM POOLS SIZES LOCKOUT ITEMS BODIES SEED SHARDS SERVERS PUMA_THREADS
         BREAK_P90 TIMEOUT_MS RINGPOOL_DEADLINE_MS FRONT FRONT_TIMEOUT_MS FRONT_CHECK_MS RINGPOOL_GC_ROOM].filter_map { |name| "#{name}=#{ENV[name]}" if ENV[name] }.join(" ")
    end

    private

    def validate
      raise ArgumentError, "RATES must be rising and positive" unless @rates.each_cons(2).all? { |a, b| a < b } && @rates.first.positive?
      raise ArgumentError, "MAX_RATE is at most #{JMeter::GROUPS * 1000} (the plan's thread groups)" if @max_rate > JMeter::GROUPS * 1000
      raise ArgumentError, "SIZES must be MIN-MAX with 1 <= MIN <= MAX" unless @sizes.first >= 1 && @sizes.first <= @sizes.last
      raise ArgumentError, "STEP, WARMUP, POOLS, ITEMS, BODIES, SHARDS must be positive" unless [@step, @pools, @items, @bodies, @shards].all?(&:positive?) && @warmup >= 0 && @ramp >= 0
      raise ArgumentError, "LOCKOUT must be at least 1 (whole seconds)" if @lockout < 1
      unknown = @servers - Server::COMMANDS.keys
      raise ArgumentError, "unknown SERVERS #{unknown.join(', ')} (known: #{Server::COMMANDS.keys.join(', ')})" unless unknown.empty? && @servers.any?
    end
  end

  # The server under test: ringpool's shards under one of COMMANDS.
  class Server
    # How each server runs ringpool (ROOT-relative paths); PORT, SHARDS and THREADS filled in.
    COMMANDS = {
      "weft" => ["exe/weft", "serve", "-C", "apps/ringpool/config/weft.rb"],
      "puma" => [Gem.bin_path("puma", "puma"), "-C", "apps/ringpool/config/puma.rb"],
      "falcon" => [Gem.bin_path("falcon", "falcon"), "serve", "-b", "http://127.0.0.1:PORT", "-n", "SHARDS",
                   "-c", "apps/ringpool/config/any_server.ru"]
    }.freeze

    # Behind a front (FRONT=haproxy), each shard needs an address of its own. Weft's workers get
    # one from config/weft.rb (RINGPOOL_SHARD_PORT); Puma and Falcon give their workers one
    # shared listener, so there each shard is a single-process server of its own on PORT (Puma
    # with RINGPOOL_SHARDS=0: single mode, no workers). Their shards find each other as under
    # COMMANDS, by the socket folder (Ringpool::ShardSlot).
    PROCESS_PER_SHARD = {
      "puma" => COMMANDS.fetch("puma"),
      "falcon" => [Gem.bin_path("falcon", "falcon"), "serve", "-b", "http://127.0.0.1:PORT", "-n", "1",
                   "-c", "apps/ringpool/config/any_server.ru"]
    }.freeze

    attr_reader :pid, :port, :name

    # @param shard_port [Integer, nil] behind a front: shard i serves the public API on
    #   shard_port + i
    def initialize(name, database_url:, shards:, dir:, shard_port: nil)
      @name = name
      @database_url = database_url
      @shards = shards
      @dir = dir
      @shard_port = shard_port
      @threads = Integer(ENV.fetch("PUMA_THREADS", "32"))
    end

    # Starts the server (a process per shard when PROCESS_PER_SHARD applies; one process group)
    # and waits until it answers GET /health on every port.
    # @raise [RuntimeError] when it exits or does not answer within 60 s (with its log's tail)
    def start
      FileUtils.mkdir_p(@dir)
      @log = File.join(@dir, "server.log")
      @pids = []
      if process_per_shard?
        @port = @shard_port
        @shards.times do |index|
          port = @shard_port + index
          launch(environment(port).merge("RINGPOOL_SHARDS" => "0"), command(PROCESS_PER_SHARD.fetch(@name), port))
        end
      else
        @port = Bench.free_port
        launch(environment(@port), command(COMMANDS.fetch(@name), @port))
      end
      @pid = @pids.first
      await
      self
    end

    # @return [Hash{String => String}] the server's environment (a subclass may add to it), with
    #   ringpool's GC settings (Ringpool::GCEnvironment; RINGPOOL_GC_ROOM=0: Ruby's defaults)
    def environment(port)
      { "DATABASE_URL" => @database_url, "RINGPOOL_BIND" => "tcp://127.0.0.1:#{port}",
        "RINGPOOL_SHARDS" => @shards.to_s, "RINGPOOL_SOCKET_DIR" => File.join(@dir, "sockets"),
        "PUMA_THREADS" => @threads.to_s }.merge(Ringpool::GCEnvironment.for)
    end

    # @return [Array<String>] the command line after `ruby`, PORT and SHARDS filled in
    def command(template, port)
      template.map { |arg| arg.sub("PORT", port.to_s).sub(/\ASHARDS\z/, @shards.to_s) }
    end

    # @return [String] how the server was run, for the report
    def description
      threads = @name == "puma" ? ", #{@threads} threads each (PUMA_THREADS)" : ""
      if process_per_shard?
        "#{@shards} x `#{shown(PROCESS_PER_SHARD.fetch(@name))}`, each on a port of its own#{' with RINGPOOL_SHARDS=0 (single mode)' if @name == 'puma'} " \
          "(one process per shard#{threads})"
      else
        "`#{shown(COMMANDS.fetch(@name))}` with RINGPOOL_SHARDS=#{@shards} (#{@shards} worker processes, one shard each#{threads})"
      end
    end

    def stop
      return unless @pid

      Process.kill(:TERM, -@pid)
      Timeout.timeout(15) { reap }
    rescue Errno::ESRCH
      nil
    rescue Timeout::Error
      Process.kill(:KILL, -@pid)
      reap
    ensure
      @pid = nil
    end

    # The server's warnings between two instants, by kind: the reactor held by one piece of code
    # for a second or more (Weft's stall report: the process got no CPU, or ran something long),
    # a shard's ownership upkeep failing (it then drops its pools until the upkeep works), and a
    # peer's breaker opening (Ringpool::FanOut logs each change of state).
    # @param from [Integer] ms since the epoch
    # @param to [Integer]
    # @return [Hash{Symbol=>Integer}] :stalls, :ownership_lost, :breakers_opened
    def warnings(from, to)
      counts = { stalls: 0, ownership_lost: 0, breakers_opened: 0 }
      return counts unless File.exist?(@log)

      File.foreach(@log) do |line|
        next unless (stamp = line[/\AW, \[(\S+) #\d+\]/, 1])

        at = (Time.iso8601(stamp).to_f * 1000).round
        next unless at >= from && at < to

        counts[:stalls] += 1 if line.include?("reactor stalled (worker")
        counts[:ownership_lost] += 1 if line.include?("holding no pools")
        counts[:breakers_opened] += 1 if line.match?(/ringpool: breaker of peer \S+ \w+ -> open /)
      end
      counts
    end

    private

    # Waits for every process of the server (one already reaped is skipped).
    def reap
      @pids.each do |pid|
        Process.wait(pid)
      rescue Errno::ECHILD
        nil
      end
    end

    def process_per_shard?
      @shard_port && PROCESS_PER_SHARD.key?(@name)
    end

    # The processes share the log (appending) and the first one's process group.
    def launch(environment, command)
      group = @pids.empty? ? true : @pids.first
      @pids << Process.spawn(environment, RbConfig.ruby, *command, chdir: ROOT, out: [@log, "a"], err: [:child, :out], pgroup: group)
    end

    def shown(template)
      template.map { |arg| arg.start_with?("/") ? File.basename(arg) : arg }.join(" ")
    end

    def await
      limit = RingpoolBench.now + 60
      ports = process_per_shard? ? Array.new(@shards) { |index| @shard_port + index } : [@port]
      loop do
        raise "ringpool exited at start (#{$?}); #{@log}:\n#{tail}" if @pids.any? { |pid| Process.waitpid(pid, Process::WNOHANG) }
        return if ports.all? { |port| healthy?(port) }
        raise "ringpool did not answer GET /health within 60 s; #{@log}:\n#{tail}" if RingpoolBench.now > limit
        # A shard that cannot boot is replaced again and again: no need to wait the whole minute.
        raise "ringpool's shards keep failing at boot; #{@log}:\n#{tail}" if boot_failures >= 3

        sleep 0.2
      end
    end

    # Short timeouts: while no shard has booted, the listener accepts but nobody answers.
    def healthy?(port)
      Net::HTTP.start("127.0.0.1", port, open_timeout: 1, read_timeout: 2) { |http| http.get("/health").code == "200" }
    rescue StandardError
      false
    end

    def boot_failures
      File.exist?(@log) ? File.read(@log).scan(/ERROR -- weft: worker \d+ failed/).size : 0
    end

    def tail
      File.exist?(@log) ? File.readlines(@log).last(30).join : "(no log)"
    end
  end

  module_function

  def now
    Process.clock_gettime(Process::CLOCK_MONOTONIC)
  end


  # Creates the pools through the API, a few requests at a time.
  # @return [Array<Array(Integer, Integer)>] [pool id, size] per pool
  def seed_pools(config, port, rng)
    sizes = Array.new(config.pools) do
      low, high = config.sizes.first, config.sizes.last
      (low * ((high.to_f / low)**rng.rand)).round.clamp(low, high)
    end
    queue = Queue.new
    sizes.each_with_index { |size, index| queue << [index, size] }
    queue.close
    created = Array.new(config.pools)
    Array.new(8) do
      Thread.new do
        Net::HTTP.start("127.0.0.1", port, read_timeout: 60) do |http|
          while (index, size = queue.pop)
            created[index] = [create_pool(http, config, index, size), size]
          end
        end
      end
    end.each(&:join)
    created
  end

  def create_pool(http, config, index, size)
    numbers = Array.new(size) { |n| format("+1555%04d%03d", index, n) }
    body = JSON.generate({ "numbers" => numbers, "overflow_number" => format("+1556%04d000", index),
                           "lockout_seconds" => config.lockout, "name" => "bench-#{index}" })
    50.times do
      response = http.post("/ring_pools", body, "content-type" => "application/json")
      return JSON.parse(response.body).fetch("id") if response.code == "201"
      raise "POST /ring_pools: #{response.code} #{response.body[0, 300]}" unless response.code == "503"

      sleep 0.2 # the schema is still being migrated
    end
    raise "POST /ring_pools kept answering 503"
  end

  # Waits (up to 30 s) until every shard owns pools, none more than its fair share + 1, and
  # either every pool is owned or the count has not moved for 2 s (a pool the shards do not
  # know of yet stays unowned until a request names it: the report says how many).
  # @return [Hash{Integer=>Integer}] pools per owning backend
  def await_ownership(database_url, pools, shards)
    conn = PG.connect(database_url)
    share = (pools.to_f / shards).ceil
    history = []
    limit = now + 30
    loop do
      counts = conn.exec_params(<<~SQL, [OWNERSHIP_LOCK_CLASS]).to_h { |row| [Integer(row["pid"]), Integer(row["count"])] }
        select pid, count(*) from pg_locks where locktype = 'advisory' and classid = $1 and granted group by pid
      SQL
      history << counts.values.sum
      balanced = counts.size == shards && counts.values.max <= share + 1
      settled = history.last == pools || (history.size > 4 && history.last(5).uniq.size == 1)
      return counts if (balanced && settled) || now > limit

      sleep 0.5
    end
  ensure
    conn&.close
  end

  # Writes the request bodies, one JSON document a line.
  def write_bodies(path, config, pools, rng)
    cumulative = []
    pools.each { |_, size| cumulative << (cumulative.last || 0) + size }
    total = cumulative.last
    File.open(path, "w") do |file|
      config.bodies.times do
        items = Array.new(config.items) do
          draw = rng.rand(total)
          pool = pools[cumulative.bsearch_index { |sum| sum > draw }].first
          { "ring_pool" => pool, "params" => { "campaign" => "spring-#{rng.rand(40)}", "source" => SOURCES.sample(random: rng),
                                               "visitor" => rng.rand(10**9).to_s } }
        end
        file.puts(JSON.generate({ "allocations" => items }))
      end
    end
  end

  # Samples the CPU counters every quarter second while the block runs.
  # @param roots [Hash{Symbol=>Proc}] name => a block giving the root pid now (nil: none yet)
  # @return [Array<Hash>] :at (ms since the epoch) and CPU seconds per root, :busy, :total
  def sample_cpu(roots)
    samples = []
    stop = false
    sampler = Thread.new do
      until stop
        table = Procfs.processes
        busy, total = Bench::Processes.machine_cpu
        sample = { at: Process.clock_gettime(Process::CLOCK_REALTIME, :millisecond), busy: busy, total: total }
        roots.each { |name, pid| sample[name] = (root = pid.call) ? Procfs.tree_cpu(table, root) : 0.0 }
        samples << sample
        sleep 0.25
      end
    end
    yield
    samples
  ensure
    stop = true
    sampler&.join
  end

  def run
    config = Config.new
    FileUtils.rm_rf(TMP)
    FileUtils.mkdir_p(TMP)
    Process.setrlimit(:NOFILE, Process.getrlimit(:NOFILE)[1]) # JMeter's threads are connections
    uptime_before = `uptime`.strip
    cluster = Weft::Test::PostgresCluster.new.start
    postmaster = Integer(File.foreach(File.join(cluster.data_dir, "postmaster.pid")).first)
    pools = nil
    runs = config.servers.map do |name|
      pools, run = run_server(config, name, cluster, postmaster)
      run
    end
    report = LoadReport.new(config, runs, pools: pools, postgres: cluster.psql("show server_version").first["server_version"],
                                          uptime_before: uptime_before, uptime_after: `uptime`.strip)
    report.write(config.out)
    warn "wrote #{config.out.delete_prefix("#{ROOT}/")}"
  ensure
    cluster&.destroy
  end

  # A server of SERVERS running on a fresh database, seeded with the run's pools, and its
  # request bodies.
  Prepared = Struct.new(:server, :database_url, :pools, :seeding, :ownership, :bodies)

  # Starts `name` on a database of its own and seeds it as every other server's (the same seed,
  # so the same pools and bodies).
  # @return [Prepared] the server is running: stop it
  def prepare_server(config, name, cluster, shard_port: nil)
    rng = Random.new(config.seed)
    database_url = cluster.create_database("ringpool_#{name}")
    server = Server.new(name, database_url: database_url, shards: config.shards, dir: File.join(TMP, name), shard_port: shard_port)
    warn "ringpool: starting #{name} with #{config.shards} shards"
    server.start
    started = now
    pools = seed_pools(config, server.port, rng)
    seeding = now - started
    ownership = await_ownership(database_url, config.pools, config.shards)
    warn format("ringpool: %s: %d pools (%d numbers) created in %.1f s; owned %s", name, pools.size, pools.sum(&:last), seeding,
                ownership.values.sort.inspect)
    bodies = File.join(TMP, name, "bodies.txt")
    write_bodies(bodies, config, pools, rng)
    Prepared.new(server, database_url, pools, seeding, ownership, bodies)
  rescue StandardError
    server&.stop
    raise
  end

  # One server's part: prepared as the others, then every rate until one breaks.
  # @return [(Array, LoadReport::ServerRun)] the pools, and the server's results
  def run_server(config, name, cluster, postmaster)
    prepared = prepare_server(config, name, cluster)
    server = prepared.server
    bodies = prepared.bodies
    jmeter = JMeter.new(File.join(TMP, "launcher"))
    steps = []
    rate = nil
    loop do
      rate = config.rates.find { |r| rate.nil? || r > rate } || (rate + config.step_up)
      break if rate > config.max_rate

      step = run_step(config, jmeter, rate, server, postmaster, bodies)
      steps << step
      warn "ringpool: #{name}: #{step.summary}"
      break if step.broken?(config)
    end
    [prepared.pools, LoadReport::ServerRun.new(name, server, steps, prepared.seeding, prepared.ownership)]
  ensure
    server&.stop
  end

  def run_step(config, jmeter, rate, server, postmaster, bodies)
    groups, = JMeter.schedules(rate)
    threads = groups.sum { |per_second, _| [(per_second * config.headroom).ceil, 2].max }
    # Threads start one after another (some milliseconds each on a busy machine) before the
    # measured window opens: allow for that in JMeter's duration.
    startup = 5 + (threads / 100.0).ceil + config.ramp
    jmeter_pid = nil
    load_before = File.read("/proc/loadavg").split.first.to_f
    result = nil
    samples = sample_cpu(server: -> { server.pid }, postgres: -> { postmaster }, jmeter: -> { jmeter_pid }) do
      result = jmeter.run(rate: rate, seconds: startup + config.warmup + config.step, headroom: config.headroom, ramp_seconds: config.ramp,
                          port: server.port, bodies: bodies, timeout_ms: config.timeout_ms,
                          log_prefix: File.join(TMP, server.name, "rate-#{rate}")) { |pid| jmeter_pid = pid }
    end
    step = Step.new(rate, result, samples, config, load_before)
    step.warnings = server.warnings(*step.window)
    step
  end

  # One rate's results, cut to the measured window: from WARMUP seconds after every JMeter thread
  # was running, for STEP seconds (less if JMeter stopped earlier).
  class Step
    attr_reader :rate, :offered, :threads, :groups, :window, :latencies, :errors, :kinds, :cpu, :arrivals, :load_before
    # @return [Hash{Symbol=>Integer}] the server's warnings in the window (Server#warnings)
    attr_accessor :warnings

    def initialize(rate, result, cpu_samples, config, load_before)
      @rate = rate
      @offered = result[:offered]
      @threads = result[:threads]
      @groups = result[:groups]
      @load_before = load_before
      samples = result[:samples].sort_by(&:start)
      raise "JMeter sent no request at #{rate} requests/s; see #{TMP}/SERVER/rate-#{rate}.out" if samples.empty?

      running = samples.find { |sample| sample.threads >= @threads } || samples.first
      from = running.start + (config.warmup * 1000)
      to = [from + (config.step * 1000), samples.last.start].min
      @window = [from, to]
      measured = samples.select { |sample| sample.start >= from && sample.start < to }
      @latencies = measured.map(&:elapsed).sort
      @errors = measured.count { |sample| sample.status != 200 }
      @kinds = JMeter::KINDS.to_h { |kind| [kind, measured.sum { |sample| sample.kinds[kind] }] }
      @arrivals = arrivals_per_100ms(measured, from, to)
      @cpu = cpu_between(cpu_samples, from, to)
    end

    # @return [Float] seconds measured
    def seconds
      (@window[1] - @window[0]) / 1000.0
    end

    def requests
      @latencies.size
    end

    # @return [Float] requests/s sent and answered in the window
    def achieved
      seconds.positive? ? requests / seconds : 0.0
    end

    # @return [Integer, nil] ms at share (nearest rank)
    def percentile(share)
      return nil if @latencies.empty?

      @latencies[[(share * @latencies.size).ceil - 1, 0].max]
    end

    def error_share
      requests.zero? ? 1.0 : @errors.fdiv(requests)
    end

    # @return [Integer] items answered (tracked, overflow or a per-item error)
    def items
      @kinds.values.sum
    end

    # @return [Float] share of the answered items of that kind
    def share(kind)
      items.zero? ? 0.0 : @kinds.fetch(kind).fdiv(items)
    end

    # @return [Float] share of the items answered with a fallback rather than by the pool's
    #   owner: the overflow number for `shard_unavailable` or `storage_unavailable`, or an error
    def degraded_share
      share("shard_unavailable") + share("storage_unavailable") + share("item_error")
    end

    # Holds a p90 limit: p90 below it, at least 95% of the rate achieved, under 1% of requests
    # failed and, unless `latency_only`, under 1% of items degraded (a server that answers fast
    # by handing out overflow numbers for want of time does not hold the SLA).
    def holds?(p90_limit_ms, latency_only: false)
      (p = percentile(0.9)) && p < p90_limit_ms && achieved >= 0.95 * @offered && error_share < 0.01 &&
        (latency_only || degraded_share < 0.01)
    end

    def broken?(config)
      achieved < 0.9 * @offered || (percentile(0.9) || Float::INFINITY) > config.break_p90 * 1000 || error_share > 0.05
    end

    def summary
      format("%d req/s offered %.0f: achieved %.0f, p50 %s p90 %s p99 %s max %s ms, %d errors, %.1f%% overflow; " \
             "CPU server %.0f%% postgres %.0f%% jmeter %.0f%%",
             @rate, @offered, achieved, percentile(0.5), percentile(0.9), percentile(0.99), @latencies.last, @errors,
             (1 - share("tracked")) * 100, @cpu[:server] * 100, @cpu[:postgres] * 100, @cpu[:jmeter] * 100)
    end

    private

    # Sends per 100 ms over the window (how evenly the load arrived): min, median, max.
    def arrivals_per_100ms(measured, from, to)
      bins = Array.new([((to - from) / 100.0).floor, 1].max, 0)
      measured.each { |sample| bins[(sample.start - from) / 100] += 1 if (sample.start - from) / 100 < bins.size }
      sorted = bins.sort
      [sorted.first, sorted[sorted.size / 2], sorted.last]
    end

    # CPU used over the window, as cores (1.0 = one core busy the whole window), per process
    # tree, and the machine's busy share of all its cores.
    def cpu_between(samples, from, to)
      at = ->(key, time) { interpolate(samples, key, time) }
      seconds = (to - from) / 1000.0
      cores = %i[server postgres jmeter].to_h { |key| [key, (at.call(key, to) - at.call(key, from)) / seconds] }
      cores.merge(machine: (at.call(:busy, to) - at.call(:busy, from)) / (at.call(:total, to) - at.call(:total, from)))
    end

    def interpolate(samples, key, time)
      after = samples.index { |sample| sample[:at] >= time } || (samples.size - 1)
      before = [after - 1, 0].max
      a, b = samples[before], samples[after]
      return b[key].to_f if b[:at] == a[:at]

      a[key] + ((b[key] - a[key]) * (time - a[:at]).clamp(0, b[:at] - a[:at]) / (b[:at] - a[:at]).to_f)
    end
  end
end

if $PROGRAM_NAME == __FILE__
  begin
    if ARGV.include?("--faults")
      require_relative "faults"
      RingpoolBench::Faults.run
    else
      RingpoolBench.run
    end
  rescue ArgumentError => e
    abort "ringpool: #{e.message}"
  end
end
