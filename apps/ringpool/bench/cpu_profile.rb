# frozen_string_literal: true

# The shards' Ruby CPU per allocation request, and where it goes, in one command:
#
#   bundle exec ruby apps/ringpool/bench/cpu_profile.rb [requests] [connections]
#       (defaults 4000 requests, 8 keep-alive connections; environment: POOLS, SIZES, ITEMS,
#        LOCKOUT, BODIES, SEED as bench/ringpool/run reads them, SHARDS=2, WARMUP_REQUESTS=2000,
#        RINGPOOL_PROFILE_INTERVAL_US=500, OUT=file to also write the report to, PROFILE=cpu,
#        allocations or none: what step 3 does)
#
# What it does:
# 1. A private PostgreSQL (test/support/postgres_cluster.rb) and ringpool under `weft serve`
#    with SHARDS shards (apps/ringpool/bench/cpu_profile_weft.rb: config/weft.rb plus signal
#    switches for StackProf and counters in each shard), seeded as bench/ringpool/run seeds it
#    (2,000 pools of 2-500 numbers, 1 s lockouts, 40-item bodies over random pools weighted by
#    size).
# 2. wrk (one thread, `connections` keep-alive connections, closed loop; apps/ringpool/bench/
#    cpu_profile.lua) sends WARMUP_REQUESTS requests, then `requests` measured ones: the shards'
#    CPU from /proc (the master and every shard, user + system) and PostgreSQL's, divided by the
#    requests answered, and the objects the shards allocated per request. Items answered with a
#    fallback are counted too: a degraded answer is cheaper, so compare runs only when it is ~0.
# 3. `requests` more under StackProf in every shard (cpu mode, raw stacks), merged: the hottest
#    frames by their own samples, and the cost broken down by stage — each sample goes to the
#    innermost frame of the stack that names a stage (STAGES), and to the side it runs on:
#    the public request, the peer request a shard serves for another, the group commit task,
#    or Weft's server and reactor outside the app. µs per request = share of samples × the CPU
#    per request of step 2 (the profiled run itself is slower by the sampling).
#    With PROFILE=allocations, step 3 counts instead the objects every shard allocates, by
#    class and site (ObjectSpace's allocation tracing, the GC off meanwhile), per request;
#    PROFILE=none skips it (for repeated timings).
#
# The load generator and PostgreSQL run on the same machine: the CPU per request, not a rate,
# is the figure to compare between checkouts (it hardly moves with the machine's load).
require_relative "../../../bench/ringpool/run"
require "stackprof"

module RingpoolCpuProfile
  ROOT = RingpoolBench::ROOT
  TMP = File.join(ROOT, "tmp", "ringpool_cpu_profile")
  CONFIG = "apps/ringpool/bench/cpu_profile_weft.rb"
  LUA = File.join(__dir__, "cpu_profile.lua")

  # Which side of a shard a sample belongs to: the first of these found going up its stack.
  SIDES = [
    ["peer request (served for the other shard)", /\ARingpool::PeerAPI#call\z/],
    ["public request", /\ARingpool::API#call\z/],
    ["group commit task", /\ARingpool::GroupCommit#flush\z/],
    ["fan-out task (peer call, client side)", /\ARingpool::FanOut#(flush|send_batch|post)\z/],
    ["ownership / maintenance", /\ARingpool::(Shard#maintain|Ownership)/]
  ].freeze

  # Stages: the innermost frame of a sample's stack that matches one of these names it.
  STAGES = [
    ["request JSON parse", /\ARingpool::Validation\.parse_json\z/],
    ["validation", /\ARingpool::Validation\.(allocation_batch|allocation_item|params_problem)\z/],
    ["allocation in memory (pick, undo)", /\ARingpool::(Allocator#pick|PoolState|NumberQueue)/],
    ["group commit: INSERT's JSON", /\ARingpool::Store#record\z/],
    ["group commit: PostgreSQL pool", /\AWeft::Postgres|\APG::/],
    ["group commit: submit/wait/settle", /\ARingpool::(GroupCommit|Allocator#(store|allocate|key|give_up|settle_late))/],
    ["peer call: request body", /\ARingpool::FanOut#post\z/],
    ["peer call: answer parse", /\ARingpool::(FanOut#read|Result\.from_peer)\z/],
    ["peer call: HTTP client", /\AWeft::HTTP::/],
    ["peer call: batching, breaker", /\ARingpool::FanOut#(call|dispatch|results|enqueue|flush|send_batch|answers|fallback)\z|\AWeft::(CircuitBreaker|Resilience)/],
    ["answer JSON (Result#to_json, #to_peer)", /\ARingpool::(Result#(to_json|to_peer)|API#json|Clock\.iso8601)\z/],
    ["metrics / overflow counters", /\ARingpool::(Metrics|OverflowCounter|Shard#record)/],
    ["routing (catalog, ownership lookups)", /\ARingpool::(Shard#(allocate|allocate_owned|resolve_pools|place|route|settle|collect)|Catalog|Ownership)/],
    ["peer API other (body read, deadline header)", /\ARingpool::PeerAPI/],
    ["API other (body read, timing)", /\ARingpool::API/],
    ["Weft server (HTTP/1.1 parse, response write)", /\AWeft::(Server|HTTP1|Stream|Connection)/],
    ["Weft reactor, tasks, timers", /\AWeft/],
    ["garbage collection", /\A\((garbage collection|marking|sweeping)\)\z/]
  ].freeze

  # ringpool under `weft serve` with the profiling config.
  class Server < RingpoolBench::Server
    def initialize(database_url:, shards:, dir:)
      super("weft", database_url: database_url, shards: shards, dir: dir)
    end

    # @return [Hash{String => String}] where the shards write their profiles
    def environment(port)
      super(port).merge("RINGPOOL_PROFILE_DIR" => @dir, "RINGPOOL_PROFILE_MODE" => RingpoolCpuProfile.mode == "allocations" ? "allocations" : "cpu")
    end

    # @return [Array<String>] `weft serve` with the profiling config
    def command(_template, _port)
      ["exe/weft", "serve", "-C", CONFIG]
    end

    # @return [Array<Integer>] the shards' pids
    def shards
      RingpoolBench::Procfs.processes.filter_map { |pid, (ppid, _, _)| pid if ppid == @pid }
    end

    # @return [Integer] the calls every shard has made to its peers so far (GET /health on each
    #   shard's own socket: its FanOut statistics)
    def peer_calls
      Dir.glob(File.join(@dir, "sockets", "shard-*.sock")).sum do |socket|
        health = JSON.parse(IO.popen(["curl", "-sf", "--unix-socket", socket, "http://shard/health"], &:read))
        health.fetch("peers").each_value.sum { |peer| peer.fetch("requests") }
      end
    end

    # Sends a switch (cpu_profile_weft.rb) to every shard.
    def signal(name)
      shards.each { |pid| Process.kill(name, pid) }
    end
  end

  module_function

  # @return [String] what step 3 does: cpu, allocations or none (PROFILE)
  def mode
    ENV.fetch("PROFILE", "cpu").tap do |mode|
      raise ArgumentError, "PROFILE is cpu, allocations or none, not #{mode.inspect}" unless %w[cpu allocations none].include?(mode)
    end
  end

  def run(requests, connections)
    config = RingpoolBench::Config.new(ENV.to_h.merge("SERVERS" => "weft", "SHARDS" => ENV.fetch("SHARDS", "2")))
    FileUtils.rm_rf(TMP)
    FileUtils.mkdir_p(TMP)
    cluster = Weft::Test::PostgresCluster.new.start
    postmaster = Integer(File.foreach(File.join(cluster.data_dir, "postmaster.pid")).first)
    database_url = cluster.create_database("ringpool_cpu")
    server = Server.new(database_url: database_url, shards: config.shards, dir: TMP).start
    rng = Random.new(config.seed)
    pools = RingpoolBench.seed_pools(config, server.port, rng)
    RingpoolBench.await_ownership(database_url, config.pools, config.shards)
    bodies = File.join(TMP, "bodies.txt")
    RingpoolBench.write_bodies(bodies, config, pools, rng)

    wrk(server.port, connections, Integer(ENV.fetch("WARMUP_REQUESTS", "2000")), bodies)
    measured = measure(server, postmaster, requests, connections, bodies)
    profile = mode == "none" ? nil : profile(server, requests, connections, bodies)
    report = report(config, requests, connections, measured, profile)
    puts report
    File.write(ENV["OUT"], report) if ENV["OUT"]
  ensure
    server&.stop
    cluster&.destroy
  end

  # @return [Hash] :cpu_us, :postgres_us and :objects per request, :answers (wrk's counts)
  def measure(server, postmaster, requests, connections, bodies)
    counters = -> { server.signal("USR2") && sleep(0.3) && read_counters }
    before_counters = counters.call
    table = RingpoolBench::Procfs.processes
    before = [RingpoolBench::Procfs.tree_cpu(table, server.pid), RingpoolBench::Procfs.tree_cpu(table, postmaster)]
    load_before = File.read("/proc/loadavg").split.first(3).join(" ")
    calls_before = server.peer_calls
    answers = wrk(server.port, connections, requests, bodies)
    peer_calls = server.peer_calls - calls_before
    table = RingpoolBench::Procfs.processes
    after = [RingpoolBench::Procfs.tree_cpu(table, server.pid), RingpoolBench::Procfs.tree_cpu(table, postmaster)]
    after_counters = counters.call
    per_request = ->(key) { (after_counters[key] - before_counters[key]).fdiv(answers["answered"]) }
    { cpu_us: (after[0] - before[0]) * 1e6 / answers["answered"], postgres_us: (after[1] - before[1]) * 1e6 / answers["answered"],
      objects: per_request.call("objects"), peer_calls: peer_calls.fdiv(answers["answered"]),
      minor_gc: per_request.call("minor_gc"), major_gc: per_request.call("major_gc"), gc_ms: per_request.call("gc_ms"),
      heap: after_counters.slice(*HEAP), pools: after_counters["pools"], answers: answers, load: load_before }
  end

  COUNTERS = %w[objects minor_gc major_gc gc_ms].freeze
  # The heap when the measured requests have ended: slots, live ones, free ones, old objects.
  HEAP = %w[heap_slots heap_live heap_free old_objects].freeze

  # @return [Hash{String => Numeric}] objects allocated, GC runs (minor, major) and milliseconds
  #   in GC so far, and the heap now, summed over every shard (their last counters lines);
  #   "pools": each shard's size pools (Ruby 3.2+), slot size => [slots, live]
  def read_counters
    lines = Dir.glob(File.join(TMP, "counters-*.jsonl")).map { |path| JSON.parse(File.readlines(path).last) }
    (COUNTERS + HEAP).to_h { |key| [key, lines.sum { |line| line.fetch(key) }] }
                     .merge("pools" => lines.map { |line| line["pools"] }.compact)
  end

  # @return [Hash] StackProf's merged results (:frames, :raw), or the allocation sites
  #   (:sites, objects by "Class file:line" over every shard), and wrk's counts
  def profile(server, requests, connections, bodies)
    pattern = File.join(TMP, mode == "allocations" ? "allocations-*.json" : "stackprof-*.dump")
    Dir.glob(pattern).each { |path| File.delete(path) }
    shards = server.shards
    server.signal("USR1")
    answers = wrk(server.port, connections, requests, bodies)
    server.signal("USR1")
    deadline = RingpoolBench.now + 60
    paths = []
    until (paths = Dir.glob(pattern)).size == shards.size
      raise "profiles missing from the shards" if RingpoolBench.now > deadline
      sleep 0.2
    end
    if mode == "allocations"
      sites = Hash.new(0)
      paths.each { |path| JSON.parse(File.read(path)).each { |site, count| sites[site] += count } }
      return { sites: sites, answers: answers }
    end
    results = paths.map { |path| Marshal.load(File.binread(path)) } # rubocop:disable Security/MarshalLoad (our own shards)
    { results: results, answers: answers }
  end

  # Runs wrk until `requests` answers.
  # @return [Hash{String => Integer}] answers by status and items by kind (cpu_profile.lua)
  def wrk(port, connections, requests, bodies)
    output = IO.popen(["wrk", "-t1", "-c#{connections}", "-d600s", "-s", LUA, "http://127.0.0.1:#{port}/", "--", bodies, requests.to_s],
                      err: %i[child out], &:read)
    counts = output.scan(/^COUNT (\w+) (\d+)$/).to_h { |name, count| [name, Integer(count)] }
    raise "wrk failed:\n#{output}" unless counts["answered"]&.positive?
    counts
  end

  # Every sample of every shard, as [stack names root first, count].
  def samples(results)
    results.flat_map do |result|
      names = result[:frames].transform_values { |frame| frame[:name] }
      raw = result[:raw] || []
      stacks = []
      index = 0
      while index < raw.size
        length = raw[index]
        frames = raw[index + 1, length]
        count = raw[index + 1 + length]
        stacks << [frames.map { |id| names[id] || "?" }, count]
        index += length + 2
      end
      stacks
    end
  end

  # @return [(Hash, Hash, Integer)] samples by side, by [side, stage], and in all
  def breakdown(stacks)
    by_side = Hash.new(0)
    by_stage = Hash.new(0)
    total = 0
    stacks.each do |names, count|
      total += count
      side = SIDES.find { |_, pattern| names.any? { |name| pattern.match?(name) } }&.first || "Weft server, reactor (outside the app)"
      stage = nil
      names.reverse_each do |name|
        stage = STAGES.find { |_, pattern| pattern.match?(name) }&.first
        break if stage
      end
      by_side[side] += count
      by_stage[stage || "other (#{names.last})"] += count
    end
    [by_side, by_stage, total]
  end

  def report(config, requests, connections, measured, profile)
    cpu = measured[:cpu_us]
    out = +"# ringpool: the shards' CPU per allocation request\n\n"
    out << "`bundle exec ruby apps/ringpool/bench/cpu_profile.rb #{requests} #{connections}` at " \
           "#{Time.now.utc.strftime('%Y-%m-%d %H:%M UTC')}, commit #{`git -C #{ROOT} rev-parse --short HEAD`.strip}; " \
           "#{config.shards} shards, #{config.pools} pools, #{config.items} items per request, load average before " \
           "#{measured[:load]}; #{RUBY_DESCRIPTION}; GC settings given to the server: " \
           "#{Ringpool::GCEnvironment.for.map { |name, value| "#{name}=#{value}" }.join(' ').then { |s| s.empty? ? 'none' : s }}.\n\n"
    answers = measured[:answers]
    items = %w[tracked exhausted shard_unavailable storage_unavailable item_errors].sum { |kind| answers[kind] }
    out << format("- **shards' CPU: %.0f µs per request** (%.1f µs per item); PostgreSQL %.0f µs per request\n", cpu, cpu / config.items,
                  measured[:postgres_us])
    out << format("- objects allocated by the shards: %.0f per request; peer calls: %.2f per request\n", measured[:objects], measured[:peer_calls])
    gc_runs = measured[:minor_gc] + measured[:major_gc]
    out << format("- GC in the shards: %.0f µs per request; %.2f minor and %.3f major runs per request (%.1f ms a run on average)\n",
                  measured[:gc_ms] * 1000, measured[:minor_gc], measured[:major_gc], gc_runs.positive? ? measured[:gc_ms] / gc_runs : 0)
    heap = measured[:heap]
    out << format("- the shards' heaps after it, together: %d slots, %d live (%d old), %d free (%.0f%%)\n", heap["heap_slots"],
                  heap["heap_live"], heap["old_objects"], heap["heap_free"], 100.0 * heap["heap_free"] / heap["heap_slots"])
    measured[:pools].each_with_index do |pools, index|
      out << "  - shard #{index + 1}'s size pools (slots / live): " <<
        pools.map { |size, (slots, live)| "#{size} B #{slots} / #{live}" }.join(", ") << "\n"
    end
    out << format("- answers: %d requests, %d failed; items %s\n", answers["answered"], answers["failed"],
                  %w[tracked exhausted shard_unavailable storage_unavailable item_errors].map { |kind| "#{kind} #{(100.0 * answers[kind] / items).round(1)}%" }.join(", "))
    return out if profile.nil?
    return out << allocation_sites(profile) if profile[:sites]

    stacks = samples(profile[:results])
    by_side, by_stage, total = breakdown(stacks)
    out << format("\nStackProf (cpu mode, every %s µs, both shards; %d samples over %d requests; degraded items while profiled: %d):\n\n",
                  ENV.fetch("RINGPOOL_PROFILE_INTERVAL_US", "500"), total, profile[:answers]["answered"],
                  profile[:answers]["shard_unavailable"] + profile[:answers]["storage_unavailable"])
    out << "| side | share | µs per request |\n|---|---:|---:|\n"
    by_side.sort_by { |_, count| -count }.each do |side, count|
      out << format("| %s | %.1f%% | %.0f |\n", side, 100.0 * count / total, cpu * count / total)
    end
    out << "\n| stage (innermost frame naming one) | share | µs per request |\n|---|---:|---:|\n"
    by_stage.sort_by { |_, count| -count }.first(30).each do |stage, count|
      out << format("| %s | %.1f%% | %.0f |\n", stage, 100.0 * count / total, cpu * count / total)
    end
    out << "\nHottest frames (own samples):\n\n"
    own = Hash.new(0)
    stacks.each { |names, count| own[names.last] += count }
    own.sort_by { |_, count| -count }.first(30).each do |name, count|
      out << format("- %.1f%% %s\n", 100.0 * count / total, name)
    end
    out
  end

  # The allocation sites with 0.5 objects per request or more, and the rest summed.
  def allocation_sites(profile)
    requests = profile[:answers]["answered"].to_f
    total = profile[:sites].each_value.sum
    out = format("\nObjects allocated per request by class and site (ObjectSpace's allocation tracing, the GC off, " \
                 "both shards; %.0f per request over %d requests; an object made in C is charged to the Ruby line " \
                 "that called into C):\n\n", total / requests, requests)
    shown = 0
    profile[:sites].sort_by { |_, count| -count }.each do |site, count|
      break if count < requests / 2
      shown += count
      out << format("- %.1f %s\n", count / requests, site)
    end
    out << format("- %.1f at other sites\n", (total - shown) / requests)
  end
end

if $PROGRAM_NAME == __FILE__
  RingpoolCpuProfile.run(Integer(ARGV.fetch(0, "4000")), Integer(ARGV.fetch(1, "8")))
end
