# frozen_string_literal: true

require_relative "../test_helper"
require "weft/postgres"

# Where Pool#query sends a statement when connections are shared: never behind a statement the
# pool has seen run long while another connection can take it (head-of-line blocking); how
# callers waiting for a slot or to pin are woken and served.
class PostgresRoutingTest < Minitest::Test
  include Weft::Test::PostgresPools

  SLOW = "select pg_sleep(0.4), 'routing-slow'"

  # Waits until `count` connections are shared (opening them can take a while on a busy
  # machine), then asserts it.
  def assert_shared(db, count)
    started = now
    sleep 0.01 until db.statistics[:shared] == count || now - started > 5
    assert_equal count, db.statistics[:shared], "the statements were not pipelined"
  end

  # The statement spawned last waits in line for the one connection (one statement in flight,
  # one waiting, none queued behind a slow one); then every task is let finish.
  def assert_waits_in_line(db, tasks, why)
    sleep 0.05
    stats = db.statistics
    assert_equal [1, 1, 0], [stats[:in_flight], stats[:waiting], stats[:queued_behind_slow]], "#{why}: #{stats}"
    Weft.gather(tasks)
  end

  # Fibers looping a short statement keep both connections shared (pipelined); a statement
  # the pool has seen run long is sent in the middle of that. The short statements sent while
  # it runs go down the other connection: none waits anywhere near as long as it runs.
  def test_short_statements_do_not_queue_behind_a_known_slow_one
    db = pool(limit: 2)
    reactor do
      db.query(SLOW) # seen alone on an idle pool: remembered as slow
      stop = false
      latencies = []
      workers = Array.new(40) do |i|
        Weft.spawn do
          until stop
            started = now
            db.query("select $1::int", i)
            latencies << [started, now - started]
          end
        end
      end
      begin
        assert_shared(db, 2)
        slow_started = now
        Weft.spawn { db.query(SLOW) }.wait
        slow_took = now - slow_started
      ensure
        stop = true # a failure above must not leave them looping
        Weft.gather(workers)
      end
      during = latencies.select { |started, _| started >= slow_started && started < slow_started + slow_took }
      assert_operator during.size, :>, 40, "too few short statements ran meanwhile"
      worst = during.map(&:last).max
      # Queued behind the slow statement, those sent as it began would wait most of its 0.4 s;
      # routed past it, a loaded machine's stalls made one wait 0.22 s (3.3 + YJIT, load 2.4).
      assert_operator worst, :<, 0.3, "a short statement waited #{worst}s behind the slow one"
    end
    assert_equal 0, db.statistics[:discarded]
  end

  # Both shared connections carry a known-slow statement, so a short one has nowhere to go
  # without queueing behind one. Past acquire_timeout it queues behind one and succeeds:
  # PoolTimeout is for a pool with no room at all.
  def test_past_acquire_timeout_a_statement_queues_behind_a_slow_one_rather_than_fail
    db = pool(limit: 2, acquire_timeout: 0.15)
    reactor do
      db.query(SLOW) # remembered as slow
      stop = false
      waits = []
      loopers = Array.new(10) do |i|
        Weft.spawn do
          until stop
            started = now
            db.query("select $1::int", i)
            waits << (now - started)
          end
        end
      end
      begin
        assert_shared(db, 2)
        Weft.gather(Array.new(2) { Weft.spawn { db.query(SLOW) } })
      ensure
        stop = true
        Weft.gather(loopers) # raises a looper's PoolTimeout, if any
      end
      assert_operator waits.max, :>, 0.15, "no short statement waited past acquire_timeout: nothing was tested"
    end
    assert_equal 0, db.statistics[:waiting]
  end

  # One connection, three known-slow statements at once: the first runs alone, the second
  # waits for the connection and then runs on it, shared; the third queues behind it on the
  # server (a segment of its own) instead of waiting in line for the connection to come back,
  # so the server starts it as the second ends, without a reactor turn in between.
  def test_a_known_slow_statement_queues_behind_one_due_to_end_first
    db = pool(limit: 1)
    sql = "select pg_sleep(0.3), 'behind-slow'"
    reactor do
      db.query(sql) # seen alone on an idle pool: remembered as slow, and how long it took
      started = now
      tasks = Array.new(3) { Weft.spawn { db.query(sql).ntuples } }
      sleep 0.45 # the first has ended, the second runs
      stats = db.statistics
      assert_equal [2, 0, 1], [stats[:in_flight], stats[:waiting], stats[:queued_behind_slow]],
                   "the third did not queue behind the second: #{stats}"
      assert_equal [1, 1, 1], Weft.gather(tasks)
      assert_operator now - started, :>=, 0.9
    end
    assert_equal 0, db.statistics[:waiting]
  end

  # A short statement marked slow only because it shared a long segment (the pool cannot tell
  # which of a segment's statements took its time) is kept apart, but the segment's time is
  # not its own: it does not queue behind a slow statement on the strength of it, and waits in
  # line instead. (It queued behind a whole known-slow pg_sleep(1.2) there, under load:
  # server_time_test's busy-reactor test in a full suite.)
  def test_a_statement_marked_slow_by_its_segment_does_not_queue_behind_a_slow_one
    db = pool(limit: 1)
    short = "select 1, 'marked-by-its-segment'"
    mate = "select pg_sleep(0.3), 'its-segment-mate'"
    ahead = "select pg_sleep(0.3), 'ahead'"
    slow_statements = db.instance_variable_get(:@slow_statements)
    reactor do
      # As the pool records a segment of both that took 0.3 s while another connection
      # answered at once (under load it took several tries to get there by queries alone).
      statement = Struct.new(:sql)
      started = now - 0.3
      slow_statements.answered(started + 0.01, started + 0.01)
      slow_statements.observe_segment([statement.new(mate), statement.new(short)], 0.3, started)
      assert slow_statements.slow?(short), "the short statement was not marked with its segment"
      db.query(ahead) # alone on an idle pool: known slow, and how long it takes
      assert slow_statements.slow?(ahead)
      # The first runs alone; the second waits for the connection and then runs on it, shared
      # (as in the test above), due to end at ~0.6 s.
      tasks = Array.new(2) { Weft.spawn { db.query(ahead) } }
      sleep 0.4
      tasks << Weft.spawn { db.query(short) }
      sleep 0.05
      stats = db.statistics
      assert_equal [1, 1, 0], [stats[:in_flight], stats[:waiting], stats[:queued_behind_slow]],
                   "the short statement queued behind the slow one: #{stats}"
      Weft.gather(tasks)
    end
  end

  # A known-slow statement does not queue behind one due to run on for much longer than it
  # takes itself: in line, it gets the connection as soon as the long one ends, the same as
  # behind it, without committing the connection to it while something shorter may come.
  def test_a_known_slow_statement_does_not_queue_behind_a_much_longer_one
    db = pool(limit: 1)
    long = "select pg_sleep(0.4), 'long'"
    short = "select pg_sleep(0.1), 'shorter'"
    reactor do
      db.query(long) # each seen alone: remembered as slow, with its time
      db.query(short)
      tasks = Array.new(2) { Weft.spawn { db.query(long) } } # one alone, then one shared
      sleep 0.5 # the second long one runs, shared, for about 0.3 s more
      tasks << Weft.spawn { db.query(short) } # 0.3 s left ahead of it: over 1.25 x 0.1 s
      assert_waits_in_line(db, tasks, "it queued behind the longer one")
    end
    assert_equal 0, db.statistics[:waiting]
  end

  # A known-slow statement running past twice the time it took when last seen may run much
  # longer this time: one sent meanwhile waits in line for the connection rather than behind it.
  def test_a_known_slow_statement_does_not_queue_behind_one_running_past_its_known_time
    db = pool(limit: 1)
    sql = "select pg_sleep($1::float8), 'overdue'"
    reactor do
      db.query(sql, 0.05) # remembered as slow, taking 0.05 s
      tasks = [Weft.spawn { db.query(sql, 0.05) }] # alone on the connection
      tasks << Weft.spawn { db.query(sql, 0.6) } # waits for it, then runs on it, shared
      sleep 0.3 # the 0.6 s one has run well over 0.1 s
      tasks << Weft.spawn { db.query(sql, 0.05) }
      assert_waits_in_line(db, tasks, "it queued behind the overdue one")
    end
    assert_equal 0, db.statistics[:waiting]
  end

  # Callers waiting for a slot are served first come, first served, woken one after another.
  # The first in line is woken by the end of the statement ahead of it, and cancelled in the
  # same reactor turn, before it can look: it must hand the wake-up on, or the others wait for
  # ever (nothing else would settle on the pool to wake them).
  def test_a_waiter_cancelled_after_its_wake_up_passes_it_on
    db = pool(limit: 1, pipeline_depth: 1, acquire_timeout: nil)
    reactor do
      waiters = []
      holder = Weft.spawn do
        db.query("select pg_sleep(0.2)")
        waiters.first.cancel # it was just woken (the statement's end wakes it) and has not run
      end
      sleep 0.05 # the holder runs its statement alone on the only connection
      served = []
      waiters.concat(Array.new(6) { |i| Weft.spawn { db.query("select $1::int", i).getvalue(0, 0).to_i.tap { |n| served << n } } })
      sleep 0.02
      assert_equal 6, db.statistics[:waiting]
      begin
        holder.wait
        assert_nil waiters.first.wait
        assert_predicate waiters.first, :cancelled?
        assert_equal [1, 2, 3, 4, 5], Weft.timeout(2) { Weft.gather(waiters.drop(1)) }, "a wake-up was lost"
      ensure
        waiters.each(&:cancel) # after a lost wake-up nothing else would end them
      end
      assert_equal [1, 2, 3, 4, 5], served, "not first come, first served"
    end
    assert_equal 0, db.statistics[:waiting]
  end

  # Many callers queue for one slot, a third of them leaving on timeouts that fall anywhere in
  # the chain of wake-ups (before their turn, as their turn comes, after it); the ones without
  # a timeout have nothing but the chain to wake them. Every caller either gets its result or
  # its own timeout, those served keep their order of arrival, and nobody is left waiting.
  def test_chained_wake_ups_survive_waiters_timing_out_anywhere
    db = pool(limit: 1, pipeline_depth: 1, acquire_timeout: nil)
    random = Random.new(12)
    outcomes = reactor do
      served = []
      tasks = Array.new(90) do |i|
        limit = (random.rand(0.0..0.4) if i % 3 == 1)
        Weft.spawn do
          run = -> { db.query("select $1::int, pg_sleep(0.003)", i) }
          limit ? Weft.timeout(limit) { run.call } : run.call
          served << i
          :ok
        rescue Weft::TimeoutError
          :timeout
        end
      end
      outcomes = begin
        Weft.timeout(10) { Weft.gather(tasks) }
      ensure
        tasks.each(&:cancel) # after a lost wake-up nothing else would end the ones without a timeout
      end
      assert_equal served.sort, served, "not first come, first served"
      outcomes
    end
    outcomes.each_with_index { |outcome, i| assert_equal :ok, outcome, "caller #{i} timed out without a timeout" unless i % 3 == 1 }
    assert_includes outcomes, :timeout, "no waiter timed out: nothing was tested"
    assert_equal 0, db.statistics[:waiting]
  end

  # Shared connections busy, and several callers waiting to lease one: one connection at a
  # time drains for them, so the others keep carrying statements; the leases are handed out in
  # the order they were asked for. (The statements take 20 ms, each with a text of its own, so
  # the pool knows none as slow and a connection takes a while to drain.)
  def test_one_connection_at_a_time_drains_for_many_lease_waiters
    db = pool(limit: 3)
    reactor do
      stop = false
      sent = 0
      loopers = Array.new(12) { Weft.spawn { db.query("select pg_sleep(0.02), #{sent += 1}") until stop } }
      draining = []
      granted = []
      during = nil
      begin
        assert_shared(db, 3)
        sampler = Weft.spawn do
          until stop
            draining << db.statistics[:draining]
            sleep 0.002
          end
        end
        before = db.statistics[:queries]
        Weft.gather(Array.new(5) do |i|
          Weft.spawn do
            lease = db.lease
            granted << i
            sleep 0.05
            lease.release
          end
        end)
        during = db.statistics[:queries] - before
      ensure
        stop = true
        Weft.gather(loopers + [sampler].compact)
      end
      assert_equal [0, 1, 2, 3, 4], granted, "leases not handed out first come, first served"
      assert_equal 1, draining.max, "#{draining.max} connections drained at once"
      assert_operator during, :>=, 5, "the statements stopped while leases waited"
    end
    assert_equal 0, db.statistics[:draining]
  end
end
