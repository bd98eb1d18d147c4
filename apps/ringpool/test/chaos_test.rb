# frozen_string_literal: true

require_relative "test_helper"
require_relative "support/process_cluster"
require "weft/http"

# Allocations from many concurrent clients across 4 shards while shards are killed (`kill -9`)
# and PostgreSQL restarts, then checked against the database and against every answer the
# clients got: no number is ever handed out twice within its lockout, every tracked answer is
# a stored allocation, every other answer an overflow number with its reason.
#
# In the suite it runs small (8,000 allocations sent open loop at 60 requests/s: 3.3 s, a kill
# every half second, the restart a third of the way in). `apps/ringpool/bin/chaos` runs the full
# 100,000 and prints the report; its settings (environment):
#
#   RINGPOOL_CHAOS_ALLOCATIONS  allocations in all (8000; a request carries 40)
#   RINGPOOL_CHAOS_RATE         requests per second, sent open loop (below; 60), or `closed`:
#                               RINGPOOL_CHAOS_CLIENTS clients in a closed loop
#   RINGPOOL_CHAOS_CLIENTS      concurrent keep-alive clients of the closed loop (8)
#   RINGPOOL_CHAOS_DEADLINE_MS  the service's fan-out deadline (50, its default)
#   RINGPOOL_CHAOS_KILL_EVERY   seconds between kill -9 of a random shard (0.5)
#   RINGPOOL_CHAOS_LOG          a file to copy the shards' log to at the end (unset: none)
#   RINGPOOL_CHAOS_STRICT       1: also fail when a request took longer than deadline + 100 ms
#                               less the client's stalls (the issue's bound; on a loaded 2-core
#                               machine the suite only reports it, and fails past deadline +
#                               500 ms less the client's stalls, or past deadline + 2 s in all)
#
# Closed loop, each client sends its next request when the last one is answered: the load is
# whatever the machine gives back, and on two cores shared with the shards and PostgreSQL it
# saturates them, so a late answer says more about the machine than about the service; and it
# ends when the work is done, however early: the suite's 8,000 allocations took 0.3 s that way
# (2026-12-06), over before the first kill. Open loop (the default) sends request n at
# start + n / rate, each from a task of its own over a shared pool of keep-alive connections,
# so a slow answer cannot hold back the sends after it (no coordinated omission), and counts
# each request's time from when it was due to be sent, not from when this process got round to
# sending it: a client that falls behind adds its delay to the figures instead of hiding it.
# That asks whether a kill or a restart pushes any request past the bound at a load the machine
# can carry, and it lasts as long as the rate says, chaos included.
#
# The clients share this process's reactor, and on two cores it stalls now and then (its own
# JSON, the shards' CPU, a replacement worker booting): a request in flight meanwhile is read
# late, however early its answer came. A fiber watches for such stalls, and the bound is
# checked on each request's time less the client stalls it overlapped (the report gives both,
# and this process's GC meanwhile). The report then lists the requests still late, each with
# what came before it (the run's start, the PostgreSQL restart, the last kill): that is where
# to look in the shards' log. PostgreSQL is restarted by a child process
# (PostgresCluster#spawn_restart) waited for in a fiber: `restart` from a thread here stalled
# the clients for up to 0.6 s.
class RingpoolChaosTest < Minitest::Test
  include Ringpool::Test::Helpers

  ALLOCATIONS = Integer(ENV.fetch("RINGPOOL_CHAOS_ALLOCATIONS", "8000"))
  CLIENTS = Integer(ENV.fetch("RINGPOOL_CHAOS_CLIENTS", "8"))
  RATE = ENV.fetch("RINGPOOL_CHAOS_RATE", "60").then { |rate| Float(rate) unless rate == "closed" }
  DEADLINE = Integer(ENV.fetch("RINGPOOL_CHAOS_DEADLINE_MS", "50")) / 1000.0
  KILL_EVERY = Float(ENV.fetch("RINGPOOL_CHAOS_KILL_EVERY", "0.5"))
  STRICT = ENV["RINGPOOL_CHAOS_STRICT"] == "1"
  ITEMS = 40
  SHARDS = 4
  POOLS = 100
  # Answered past this many seconds after the deadline: the issue's bound.
  BOUND = 0.1
  # Past this many seconds after the deadline, less the client's stalls, every open-loop run
  # fails, the suite's included: what a loaded 2-core machine holds with room. The suite's run
  # with 4 busy loops beside it (2026-12-06): at most 73 ms on Ruby 3.1 (5 runs), 141 ms on 3.3
  # + YJIT (6 runs); with 6 busy loops on 3.3 + YJIT 133-259 ms (3 runs), past the issue's 150
  # in two, so that bound is not one for a suite beside other jobs.
  SUITE_BOUND = 0.5
  # Past this, as the client measured it (its own stalls included), every run fails.
  HARD_BOUND = 2.0

  # One POST /allocations as the client saw it. Its answers are checked as they come (Answers),
  # not kept to the end, so that this process's heap, and with it the GC pauses that stall
  # every client at once, does not grow with the run (the report gives the GC).
  # `started_at` is when its time starts: when it was due (open loop) or sent (closed loop);
  # `sent_at` when this process began sending it; `attempts` how many times it was sent (see
  # ATTEMPTS).
  Request = Struct.new(:status, :seconds, :error, :started_at, :sent_at, :attempts)
  # What the answers said, in all: tracked answers as [number, lockout end in µs], how many
  # overflow numbers (and item errors) for each reason, and anything wrong with an answer.
  Answers = Struct.new(:tracked, :reasons, :problems)
  # Late requests are told apart by what came before them: the run's first SETTLING seconds,
  # the PostgreSQL restart until AFTER_RESTART seconds after it is back up, or else the last kill.
  SETTLING = 1.0
  AFTER_RESTART = 3.0
  # Client stalls shorter than this are not recorded: a reactor turn on a busy machine.
  STALL = 0.02
  # A request in flight on a worker that is killed gets no answer: its connection is reset. A
  # client sends it again, as a front proxy does (HAProxy's `retry-on conn-failure
  # empty-response`), up to this many times in all, and its time counts from the first send (or
  # when it was due), so a retried request is held to the same bound as any other. Sending it
  # again is safe: what the killed worker stored was never handed out (its numbers stay locked
  # out unused, "stored but not handed out"), and the table refuses a number twice whatever the
  # shards believe.
  ATTEMPTS = 3
  # The report lists this many of the slowest requests (less the client's stalls) with what came
  # before them, late or not: where the time goes when none is late.
  SLOWEST = 5

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
    # RINGPOOL_CHAOS_LOG=FILE keeps the shards' log (their takeovers, breakers, failures), which
    # goes with the cluster's folder otherwise.
    keep = ENV["RINGPOOL_CHAOS_LOG"]
    FileUtils.cp(@cluster.log, keep) if keep && @cluster && File.exist?(@cluster.log)
    @cluster&.stop
    @postgres&.destroy
  end

  def test_no_number_is_handed_out_twice_through_kills_and_a_database_restart
    pools = create_pools
    requests = nil
    answers = Answers.new([], Hash.new(0), [])
    chaos_done = { kills: 0, restarts: 0 }
    stalls = []
    events = []
    load_before = loadavg
    started = now
    cpu = Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID)
    gc = GC.stat.values_at(:major_gc_count, :minor_gc_count, :time)
    Weft.run do
      total = (ALLOCATIONS + ITEMS - 1) / ITEMS
      requests = []
      chaos = Weft.spawn { make_chaos(-> { requests.size }, total, chaos_done, events) }
      watch = Weft.spawn { watch_stalls(stalls) }
      RATE ? open_loop(pools, answers, requests, total) : closed_loop(pools, answers, requests, total)
      chaos.cancel
      watch.cancel
    end
    elapsed = now - started
    cpu = Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID) - cpu
    gc = GC.stat.values_at(:major_gc_count, :minor_gc_count, :time).zip(gc).map { |after, before| after - before }
    client = { elapsed: elapsed, cpu: cpu, gc: gc, stalls: stalls, load: [load_before, loadavg] }
    timeline = Timeline.new(started, events)
    report = check(requests, answers, chaos_done, client, timeline)
    puts report if ENV["RINGPOOL_CHAOS_REPORT"] == "1"
    assert_chaos(chaos_done, requests, timeline)
    assert_bounds(requests, stalls)
  end

  private

  # CLIENTS clients, each with a connection of its own, each sending its next request when the
  # last one is answered, until `total` are sent.
  def closed_loop(pools, answers, requests, total)
    remaining = total
    Weft.gather(Array.new(CLIENTS) do
      Weft.spawn do
        http = client
        while remaining.positive?
          remaining -= 1
          requests << post(http, pools, answers)
        end
      ensure
        http&.close
      end
    end)
  end

  # `total` requests at RATE a second, request n due at start + n / RATE and sent from a task of
  # its own, however many are still waiting for their answers; each one's time counts from when
  # it was due. A turn of this process that comes late sends every request due meanwhile at once.
  def open_loop(pools, answers, requests, total)
    http = client(limit: 512)
    first = now
    Weft.gather(Array.new(total) do |index|
      due = first + index / RATE
      wait = due - now
      sleep(wait) if wait.positive?
      Weft.spawn { requests << post(http, pools, answers, due) }
    end)
  ensure
    http&.close
  end

  # Keep-alive connections to the cluster's public port. Opening a connection is not throttled
  # (max_connecting): a burst of sends due at once gets connections at once.
  def client(limit: 1)
    Weft::HTTP::Client.new("http://127.0.0.1:#{@cluster.port}", proxy: nil, limit: limit, max_connecting: nil,
                                                                 read_timeout: 10, deadline: 10)
  end

  # @return [String] the 1, 5 and 15 minute load averages
  def loadavg
    File.read("/proc/loadavg").split.first(3).join(" ")
  end

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

  # One POST /allocations of ITEMS random pools, its time counted from `due` (open loop) or from
  # when it is first sent to when its answer is read; sent again when its connection is reset
  # (ATTEMPTS).
  # @return [Request]
  def post(http, pools, answers, due = nil)
    asked = Array.new(ITEMS) { pools.keys.sample }
    items = asked.each_with_index.map { |id, index| { "ring_pool" => id, "params" => { "i" => index } } }
    body = JSON.generate({ "allocations" => items })
    sent = now
    started = due || sent
    attempts = 0
    begin
      attempts += 1
      response = http.post("/allocations", body: body, headers: { "content-type" => "application/json" })
      got = response.body
    rescue Weft::HTTP::ConnectionReset
      raise unless attempts < ATTEMPTS
      # The killed worker's other keep-alive connections may still sit idle in the client's
      # pool, and a resend could take one of them each time (seen in 2 runs of 12): resent on a
      # fresh connection, which a live worker accepts.
      http.close_idle
      retry
    end
    seconds = now - started
    read_answers(asked, JSON.parse(got).fetch("allocations"), pools, answers) if response.status == 200
    Request.new(response.status, seconds, nil, started, sent, attempts)
  rescue Weft::HTTP::Error => e
    # No answer, so nothing handed out; the check fails on it.
    Request.new(nil, now - started, e, started, sent, attempts)
  end

  # Checks one request's answers against the pools it asked for, in item order: each an overflow
  # number with its reason, a per-item error, or a tracked number with its lockout end.
  def read_answers(asked, got, pools, answers)
    return answers.problems << "#{got.size} answers to #{asked.size} items" unless got.size == asked.size
    asked.zip(got) do |id, answer|
      next answers.problems << "an answer out of item order: #{answer.inspect} for pool #{id}" unless answer["ring_pool"] == id
      if answer["overflow"]
        overflow = pools.fetch(id)["overflow_number"]
        answers.problems << "not the overflow number of pool #{id}: #{answer.inspect}" unless answer["number"] == overflow
        answers.reasons[answer["reason"]] += 1
      elsif answer["error"]
        # A shard that does not know the pool yet looks it up in PostgreSQL; when that fails
        # (PostgreSQL down, or the lookup outlived the deadline: seen at 200 requests/s with no
        # chaos at all) it cannot name the overflow number, and says so. A shard replaced while
        # PostgreSQL was down knows the pools of the catalog snapshot (Catalog), not newer ones.
        # Nothing is handed out.
        answers.problems << "an item error: #{answer.inspect}" unless answer["error"] == "storage_unavailable"
        answers.reasons["error: storage_unavailable (the shard could not look the pool up)"] += 1
      elsif (until_us = answer["lockout_until"] && Ringpool::Clock.parse(answer["lockout_until"]))
        answers.tracked << [answer["number"], until_us]
      else
        answers.problems << "a tracked number without its lockout end: #{answer.inspect}"
      end
    end
  end

  def now
    Process.clock_gettime(Process::CLOCK_MONOTONIC)
  end

  # Records [from, to] of every stall of this process's reactor longer than STALL: a 10 ms
  # sleep that ends late says the reactor could not run its fibers meanwhile.
  def watch_stalls(stalls)
    loop do
      asleep = now + 0.01
      sleep 0.01
      woke = now
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
  # of the requests are done; counts both in `counts` and notes each in `events` (monotonic
  # time, what) until cancelled.
  def make_chaos(done, total, counts, events)
    restart = nil
    loop do
      sleep KILL_EVERY
      index = rand(SHARDS)
      pid = @cluster.shard_health(index, timeout: 0.5)&.fetch("pid")
      if pid
        Process.kill("KILL", pid)
        counts[:kills] += 1
        events << [now, :kill, "kill -9 of shard #{index}"]
      end
      next if restart || done.call < total / 3
      counts[:restarts] += 1
      events << [now, :restart, "PostgreSQL restart began"]
      restart = Weft.spawn(detached: true) { restart_postgres(events) }
    end
  ensure
    restart&.wait
  end

  # `pg_ctl restart` (waiting until PostgreSQL accepts connections again) in a child process.
  def restart_postgres(events)
    Process.wait(@postgres.spawn_restart)
    raise "pg_ctl restart failed: #{$?.inspect}" unless $?.success? # rubocop:disable Style/SpecialGlobalVars
    events << [now, :restarted, "PostgreSQL up again"]
  end

  # When the chaos happened, to say what came before each late request.
  class Timeline
    # @param started [Float] the run's start (monotonic)
    # @param events [Array<(Float, Symbol, String)>] monotonic time, kind, description
    def initialize(started, events)
      @started = started
      @events = events.sort_by(&:first)
    end

    # @return [Float] seconds since the run's start
    def offset(time)
      time - @started
    end

    # @return [Symbol] :settling, :restart (PostgreSQL down, or back up less than AFTER_RESTART
    #   seconds ago), :kill (after a kill, none of the above) or :none
    def cause(time)
      return :settling if time - @started < SETTLING
      began = @events.find { |at, kind, _| kind == :restart && at <= time }
      up = @events.find { |at, kind, _| kind == :restarted }
      return :restart if began && (up.nil? || time < up.first + AFTER_RESTART)
      since(time, :kill) ? :kill : :none
    end

    # @return [Boolean] whether PostgreSQL had been restarted and was up again at `time`
    def after_restart?(time)
      @events.any? { |at, kind, _| kind == :restarted && at <= time }
    end

    # @return [String] how long PostgreSQL was down, or that it was not restarted
    def restart
      began = @events.find { |_, kind, _| kind == :restart }
      up = @events.find { |_, kind, _| kind == :restarted }
      return "not restarted" unless began && up
      format("restarted at +%.2f s, up again %.2f s later", offset(began.first), up.first - began.first)
    end

    # @return [Float, nil] seconds since the latest event of `kind` before `time`
    def since(time, kind)
      event = last(time, kind)
      event && time - event.first
    end

    # @return [String] the latest event before `time`, and how long before
    def before(time)
      at, _kind, what = @events.reverse_each.find { |event_at, _, _| event_at <= time }
      at ? format("%.2f s after %s", time - at, what) : "before any chaos"
    end

    private

    def last(time, kind)
      @events.reverse_each.find { |at, event_kind, _| event_kind == kind && at <= time }
    end
  end

  # Checks every answer against the database and the bounds; see the class comment.
  # @param client [Hash] this process: elapsed and CPU seconds, GC counts and ms, stalls, load
  #   averages before and after
  # @return [String] the report
  def check(requests, answers, chaos_done, client, timeline)
    stalls = client[:stalls]
    answered = requests.reject(&:error)
    refute_empty answered
    assert_equal [200], answered.map(&:status).uniq
    assert_empty answers.problems.first(5), "#{answers.problems.size} answers were wrong"
    tracked = answers.tracked
    reasons = answers.reasons
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
    served_of = served_times(answered, stalls)
    served = served_of.values.sort
    late_served = served.count { |s| s > DEADLINE + BOUND }
    late_requests = served_of.select { |_, s| s > DEADLINE + BOUND }.keys.sort_by(&:started_at)
    slowest = served_of.max_by(SLOWEST, &:last).map(&:first)
    retried = answered.select { |request| request.attempts > 1 }

    lost = requests.count(&:error)
    items = answered.size * ITEMS
    elapsed = client[:elapsed]
    gc = client[:gc]
    <<~REPORT
      ringpool chaos: #{SHARDS} shards, #{load_shape(requests)}, #{requests.size} requests of #{ITEMS} items in #{elapsed.round(1)} s
      (#{(items / elapsed).round} allocations/s), deadline #{(DEADLINE * 1000).round} ms, #{chaos_done[:kills]} kill -9, #{chaos_done[:restarts]} PostgreSQL restart(s) (#{timeline.restart}; #{requests.count { |request| timeline.after_restart?(request.started_at) }} requests after it)
      #{RUBY_DESCRIPTION}; load average before / after: #{client[:load].join(' / ')}; this process's CPU: #{(client[:cpu] / elapsed * 100).round}% of a core
      answered: #{answered.size} requests, #{items} items: #{tracked.size} tracked, #{reasons.sort.map { |r, n| "#{n} #{r}" }.join(', ')}
      sent again (a worker killed mid-request reset the connection): #{retried.size} requests, #{retried.sum(&:attempts) - retried.size} times in all, answered within #{retried.empty? ? 0 : (retried.map(&:seconds).max * 1000).round} ms of the first send
      no answer after #{ATTEMPTS} attempts: #{lost} requests (#{requests.filter_map(&:error).map(&:class).tally.map { |k, n| "#{n} #{k.name.split('::').last}" }.join(', ')})
      stored allocations: #{rows.size} (#{rows.size - handed_out.size} stored but not handed out: a peer that answered after the deadline, or a killed worker's); handed out twice: #{twice.size}; tracked answers not stored: #{missing.size}; overlapping lockouts in the table: 0
      latency: p50 #{ms(seconds, 0.5)}, p99 #{ms(seconds, 0.99)}, max #{(seconds.last * 1000).round} ms; over deadline + #{(BOUND * 1000).round} ms: #{late} of #{seconds.size}
      the client's own stalls over #{(STALL * 1000).round} ms: #{stalls.size}, #{(stalls.sum { |from, to| to - from } * 1000).round} ms in all, longest #{((stalls.map { |from, to| to - from }.max || 0) * 1000).round} ms (its GC meanwhile: #{gc[0]} major and #{gc[1]} minor runs, #{gc[2]} ms)
      latency less the client's stalls: p50 #{ms(served, 0.5)}, p99 #{ms(served, 0.99)}, max #{(served.last * 1000).round} ms; over deadline + #{(BOUND * 1000).round} ms: #{late_served} of #{served.size}
      #{late_summary(late_requests, timeline)}
      #{late_requests.map { |request| late_line(request, served_of[request], timeline) }.join("\n")}
      the #{SLOWEST} slowest, less the client's stalls (start, took, less the client's stalls, what came before):
      #{slowest.map { |request| late_line(request, served_of[request], timeline) }.join("\n")}
    REPORT
  end

  # The run had its chaos while requests were being sent: kills, the PostgreSQL restart, and
  # requests after PostgreSQL was back. A run over before them (as the suite's closed loop
  # was, 0.3 s for its 8,000 allocations) proves nothing about them.
  def assert_chaos(chaos_done, requests, timeline)
    assert_operator chaos_done[:kills], :>=, 2, "fewer than 2 kills during the run"
    assert_equal 1, chaos_done[:restarts], "PostgreSQL was not restarted during the run"
    after = requests.count { |request| timeline.after_restart?(request.started_at) }
    assert_operator after, :>=, 1, "no request was sent after PostgreSQL was back up"
  end

  # Every request answered (after its retries), none past the hard bound, and none past
  # SUITE_BOUND (open loop) or the issue's BOUND (strict mode) less the client's stalls.
  # Checked after the report is printed, so that a failing run still says where its time went.
  def assert_bounds(requests, stalls)
    unanswered = requests.select(&:error)
    assert_empty unanswered.first(5).map(&:error), "#{unanswered.size} requests got no answer in #{ATTEMPTS} attempts"
    answered = requests.reject(&:error)
    slowest = answered.map(&:seconds).max
    assert_operator slowest, :<, DEADLINE + HARD_BOUND, "a request took #{slowest.round(3)} s"
    # A closed loop saturates the machine by design: only the strict check applies to it.
    bound = STRICT ? BOUND : (SUITE_BOUND if RATE)
    return unless bound
    served = served_times(answered, stalls).values
    late = served.count { |s| s > DEADLINE + bound }
    assert_equal 0, late, "#{late} requests took longer than the deadline + #{(bound * 1000).round} ms, " \
                          "not counting the client's own stalls (the slowest #{(served.max * 1000).round} ms)"
  end

  # @return [Hash{Request => Float}] each request's time less the client stalls it overlapped
  def served_times(answered, stalls)
    answered.each_with_object({}.compare_by_identity) do |request, times|
      times[request] = request.seconds - stalled_during(request, stalls)
    end
  end

  # Closed loop: how many clients. Open loop: the rate, and how late this process sent requests
  # after they were due (already counted in their times; a client stall shows here too).
  def load_shape(requests)
    return "#{CLIENTS} closed-loop clients" unless RATE
    lags = requests.map { |request| request.sent_at - request.started_at }
    format("open loop at %g requests/s (sent after they were due: max %d ms, %d over %d ms)", RATE,
           (lags.max || 0) * 1000, lags.count { |lag| lag > STALL }, STALL * 1000)
  end

  # The late requests (less the client's stalls) by what came before them (Timeline#cause).
  def late_summary(late_requests, timeline)
    causes = late_requests.map { |request| timeline.cause(request.started_at) }.tally
    after_kills = late_requests.select { |request| timeline.cause(request.started_at) == :kill }
                               .map { |request| timeline.since(request.started_at, :kill) }
    kills = after_kills.empty? ? "" : format(" (%.2f-%.2f s after it)", after_kills.min, after_kills.max)
    "those by what came before them: the first #{SETTLING} s #{causes.fetch(:settling, 0)}, the PostgreSQL restart " \
      "(until #{AFTER_RESTART} s after it was up) #{causes.fetch(:restart, 0)}, a kill #{causes.fetch(:kill, 0)}#{kills}, " \
      "nothing #{causes.fetch(:none, 0)}; one by one (start, took, less the client's stalls, what came before):"
  end

  def late_line(request, served, timeline)
    format("  +%.2f s  %d ms  %d ms  %s", timeline.offset(request.started_at), request.seconds * 1000, served * 1000,
           timeline.before(request.started_at))
  end

  def ms(sorted, quantile)
    "#{(sorted[((sorted.size - 1) * quantile).round] * 1000).round} ms"
  end
end
