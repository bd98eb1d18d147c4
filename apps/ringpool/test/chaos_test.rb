# frozen_string_literal: true

require_relative "test_helper"
require_relative "support/process_cluster"
require "weft/http"

# Allocations from many concurrent clients across 4 shards while shards are killed (`kill -9`)
# and PostgreSQL restarts, then checked against the database and against every answer the
# clients got: no number is ever handed out twice within its lockout, every tracked answer is
# a stored allocation, every other answer an overflow number with its reason.
#
# In the suite it runs small (8,000 allocations, a few seconds, a kill every half second). `apps/ringpool/bin/chaos` runs
# the full 100,000 and prints the report; its settings (environment):
#
#   RINGPOOL_CHAOS_ALLOCATIONS  allocations in all (8000; a request carries 40)
#   RINGPOOL_CHAOS_CLIENTS      concurrent keep-alive clients (8)
#   RINGPOOL_CHAOS_DEADLINE_MS  the service's fan-out deadline (50, its default)
#   RINGPOOL_CHAOS_KILL_EVERY   seconds between kill -9 of a random shard (0.5)
#   RINGPOOL_CHAOS_STRICT       1: also fail when a request took longer than deadline + 100 ms
#                               (the issue's bound; on a loaded 2-core machine the suite only
#                               reports it, and fails past deadline + 2 s)
#
# The clients share this process's reactor, and on two cores it stalls now and then (its own
# JSON, the shards' CPU, a replacement worker booting): a request in flight meanwhile is read
# late, however early its answer came. A fiber watches for such stalls, and the bound is
# checked on each request's time less the client stalls it overlapped (the report gives both).
# PostgreSQL is restarted by a child process (PostgresCluster#spawn_restart) waited for in a
# fiber: `restart` from a thread here stalled the clients for up to 0.6 s.
class RingpoolChaosTest < Minitest::Test
  include Ringpool::Test::Helpers

  ALLOCATIONS = Integer(ENV.fetch("RINGPOOL_CHAOS_ALLOCATIONS", "8000"))
  CLIENTS = Integer(ENV.fetch("RINGPOOL_CHAOS_CLIENTS", "8"))
  DEADLINE = Integer(ENV.fetch("RINGPOOL_CHAOS_DEADLINE_MS", "50")) / 1000.0
  KILL_EVERY = Float(ENV.fetch("RINGPOOL_CHAOS_KILL_EVERY", "0.5"))
  STRICT = ENV["RINGPOOL_CHAOS_STRICT"] == "1"
  ITEMS = 40
  SHARDS = 4
  POOLS = 100
  # Answered past this many seconds after the deadline: the issue's bound.
  BOUND = 0.1
  # Past this, even the suite's run fails: something waited that must not.
  HARD_BOUND = 2.0

  # One POST /allocations as the client saw it.
  Request = Struct.new(:items, :status, :answers, :seconds, :error, :started_at)
  # Client stalls shorter than this are not recorded: a reactor turn on a busy machine.
  STALL = 0.02

  def watchdog_timeout
    120 + ALLOCATIONS / 100.0
  end

  def setup
    @postgres = Weft::Test::PostgresCluster.new.start # private: this test restarts it
    @database_url = fresh_database(@postgres)
    @cluster = Ringpool::Test::ProcessCluster.new(database_url: @database_url, shards: SHARDS,
                                                  deadline_ms: (DEADLINE * 1000).round).start
  end

  def teardown
    @cluster&.stop
    @postgres&.destroy
  end

  def test_no_number_is_handed_out_twice_through_kills_and_a_database_restart
    pools = create_pools
    requests = nil
    chaos_done = { kills: 0, restarts: 0 }
    stalls = []
    started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    Weft.run do
      remaining = (ALLOCATIONS + ITEMS - 1) / ITEMS
      requests = []
      chaos = Weft.spawn { make_chaos(-> { requests.size }, remaining, chaos_done) }
      watch = Weft.spawn { watch_stalls(stalls) }
      Weft.gather(Array.new(CLIENTS) do
        Weft.spawn do
          http = Weft::HTTP::Client.new("http://127.0.0.1:#{@cluster.port}", proxy: nil, read_timeout: 10, deadline: 10)
          while remaining.positive?
            remaining -= 1
            requests << post(http, pools)
          end
        ensure
          http&.close
        end
      end)
      chaos.cancel
      watch.cancel
    end
    elapsed = Process.clock_gettime(Process::CLOCK_MONOTONIC) - started
    report = check(requests, pools, chaos_done, elapsed, stalls)
    puts report if ENV["RINGPOOL_CHAOS_REPORT"] == "1"
  end

  private

  # POOLS pools of 2 to 40 numbers with 1 to 3 s lockouts: numbers come round again many times
  # during the run, so a double hand-out would have every chance to happen.
  def create_pools
    Array.new(POOLS) do
      pool = create_pool(@cluster.port, count: rand(2..40), lockout: rand(1..3))
      [pool["id"], pool]
    end.to_h.tap do |pools|
      wait_until(20, "every pool owned") do
        owners = pools.keys.sample(10).map { |id| api(@cluster.port, :get, "/ring_pools/#{id}").last["owner"] }
        owners.none?(&:nil?)
      end
    end
  end

  def post(http, pools)
    items = Array.new(ITEMS) { |index| { "ring_pool" => pools.keys.sample, "params" => { "i" => index } } }
    body = JSON.generate({ "allocations" => items })
    started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    response = http.post("/allocations", body: body, headers: { "content-type" => "application/json" })
    seconds = Process.clock_gettime(Process::CLOCK_MONOTONIC) - started
    answers = response.status == 200 ? JSON.parse(response.body).fetch("allocations") : nil
    Request.new(items, response.status, answers, seconds, nil, started)
  rescue Weft::HTTP::Error => e
    # A request in flight on a worker that was killed: no answer, so nothing handed out.
    Request.new(items, nil, nil, Process.clock_gettime(Process::CLOCK_MONOTONIC) - started, e, started)
  end

  # Records [from, to] of every stall of this process's reactor longer than STALL: a 10 ms
  # sleep that ends late says the reactor could not run its fibers meanwhile.
  def watch_stalls(stalls)
    loop do
      asleep = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 0.01
      sleep 0.01
      woke = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      stalls << [asleep, woke] if woke - asleep > STALL
    end
  end

  # @return [Float] seconds of the request's time during which the client was stalled
  def stalled_during(request, stalls)
    from = request.started_at
    to = from + request.seconds
    stalls.sum { |stall_from, stall_to| [[to, stall_to].min - [from, stall_from].max, 0].max }
  end

  # Kills a random shard every KILL_EVERY seconds, and restarts PostgreSQL once, when a third
  # of the requests are done; counts both in `counts` until cancelled.
  def make_chaos(done, total, counts)
    restarted = nil
    loop do
      sleep KILL_EVERY
      pid = @cluster.shard_health(rand(SHARDS), timeout: 0.5)&.fetch("pid")
      if pid
        Process.kill("KILL", pid)
        counts[:kills] += 1
      end
      next if restarted || done.call < total / 3
      restarted = @postgres.spawn_restart
      counts[:restarts] += 1
    end
  ensure
    if restarted
      Process.wait(restarted)
      raise "pg_ctl restart failed: #{$?.inspect}" unless $?.success? # rubocop:disable Style/SpecialGlobalVars
    end
  end

  # @return [String] the report
  def check(requests, pools, chaos_done, elapsed, stalls)
    answered = requests.select(&:answers)
    refute_empty answered
    assert(requests.all? { |request| request.answers || request.error }, "a request got neither an answer nor an error")
    assert_equal [200], answered.map(&:status).uniq

    tracked = []
    reasons = Hash.new(0)
    answered.each do |request|
      assert_equal request.items.size, request.answers.size
      request.items.zip(request.answers) do |item, answer|
        assert_equal item["ring_pool"], answer["ring_pool"], "an answer out of item order"
        if answer["overflow"]
          assert_equal pools.fetch(item["ring_pool"])["overflow_number"], answer["number"]
          reasons[answer.fetch("reason")] += 1
        elsif answer["error"]
          # A shard replaced while PostgreSQL was down knows the pools from the catalog snapshot
          # (Catalog); a pool the snapshot does not have yet (none written so far) it cannot
          # name the overflow number of, and says so. Nothing is handed out.
          assert_equal "storage_unavailable", answer["error"], answer.inspect
          reasons["error: storage_unavailable (pool unknown to a new shard)"] += 1
        else
          refute_nil answer["lockout_until"], answer.inspect
          tracked << [answer["number"], Ringpool::Clock.parse(answer["lockout_until"])]
        end
      end
    end
    assert_empty reasons.keys.grep_v(/\Aerror: /) - Ringpool::Result::REASONS, "unknown overflow reasons"

    rows = with_db(@database_url) do |db|
      overlaps = db.query(<<~SQL).getvalue(0, 0).to_i
        select count(*) from allocations a join allocations b
          on a.number = b.number and a.ctid < b.ctid and a.lockout && b.lockout
      SQL
      assert_equal 0, overlaps, "the database holds a number twice for overlapping lockouts"
      db.query("select number, (extract(epoch from upper(lockout)) * 1000000)::bigint as until_us from allocations").map do |row|
        [row["number"], Integer(row["until_us"])]
      end
    end
    stored = rows.tally
    handed_out = tracked.tally
    twice = handed_out.select { |_, count| count > 1 }
    assert_empty twice, "the same stored allocation was handed to two callers"
    missing = handed_out.keys.reject { |key| stored.key?(key) }
    assert_empty missing, "tracked answers with no stored allocation: #{missing.first(5).inspect}"

    seconds = answered.map(&:seconds).sort
    late = seconds.count { |s| s > DEADLINE + BOUND }
    served = answered.map { |request| request.seconds - stalled_during(request, stalls) }.sort
    late_served = served.count { |s| s > DEADLINE + BOUND }
    assert_operator seconds.last, :<, DEADLINE + HARD_BOUND, "a request took #{seconds.last.round(3)} s"
    if STRICT
      assert_equal 0, late_served, "#{late_served} requests took longer than the deadline + #{BOUND * 1000} ms, " \
                                   "not counting the client's own stalls"
    end

    lost = requests.count(&:error)
    items = answered.sum { |request| request.items.size }
    <<~REPORT
      ringpool chaos: #{SHARDS} shards, #{CLIENTS} clients, #{requests.size} requests of #{ITEMS} items in #{elapsed.round(1)} s
      (#{(items / elapsed).round} allocations/s), deadline #{(DEADLINE * 1000).round} ms, #{chaos_done[:kills]} kill -9, #{chaos_done[:restarts]} PostgreSQL restart(s)
      answered: #{answered.size} requests, #{items} items: #{tracked.size} tracked, #{reasons.sort.map { |r, n| "#{n} #{r}" }.join(', ')}
      no answer (worker killed mid-request): #{lost} requests (#{requests.filter_map(&:error).map(&:class).tally.map { |k, n| "#{n} #{k.name.split('::').last}" }.join(', ')})
      stored allocations: #{rows.size} (#{rows.size - handed_out.size} stored but not handed out: a peer that answered after the deadline, or a killed worker's); handed out twice: #{twice.size}; tracked answers not stored: #{missing.size}; overlapping lockouts in the table: 0
      latency: p50 #{ms(seconds, 0.5)}, p99 #{ms(seconds, 0.99)}, max #{(seconds.last * 1000).round} ms; over deadline + #{(BOUND * 1000).round} ms: #{late} of #{seconds.size}
      the client's own stalls over #{(STALL * 1000).round} ms: #{stalls.size}, #{(stalls.sum { |from, to| to - from } * 1000).round} ms in all, longest #{((stalls.map { |from, to| to - from }.max || 0) * 1000).round} ms
      latency less the client's stalls: p50 #{ms(served, 0.5)}, p99 #{ms(served, 0.99)}, max #{(served.last * 1000).round} ms; over deadline + #{(BOUND * 1000).round} ms: #{late_served} of #{served.size}
    REPORT
  end

  def ms(sorted, quantile)
    "#{(sorted[((sorted.size - 1) * quantile).round] * 1000).round} ms"
  end
end
