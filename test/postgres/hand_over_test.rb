# frozen_string_literal: true

require_relative "../test_helper"
require "weft/postgres"

# A connection given back (a lease released, a statement run alone, a drained pipeline) carries
# the statement of the first caller waiting for a slot at once, in the same turn of the reactor:
# woken to send it itself, that caller would run a turn later, with the connection idle
# meanwhile (Pool#hand_to_slot_waiter). Each test looks at the server from a blocking fiber right
# after the connection is given back: the reactor does not turn while it looks, so a statement
# the server runs then was written without a turn.
class PostgresHandOverTest < Minitest::Test
  include Weft::Test::PostgresPools

  # Seconds to look for a statement on the server before deciding it was not written.
  LOOK_FOR = 1.0

  # Whether a statement whose text contains `tag` runs on the server within LOOK_FOR, looked
  # for without letting the reactor turn.
  def running_without_a_turn?(tag)
    Fiber.new(blocking: true) do
      give_up = now + LOOK_FOR
      found = false
      until (found = active(tag) == 1) || now > give_up
        sleep 0.005 # a blocking fiber: the thread sleeps, the reactor does not run
      end
      found
    end.resume
  end

  # Spawns a caller of #query and lets it run into the line for a slot.
  def queue(db, sql, *params)
    waiting = db.statistics[:waiting]
    task = Weft.spawn { db.query(sql, *params) }
    sleep 0.005 until db.statistics[:waiting] > waiting
    task
  end

  def test_a_released_lease_carries_the_first_waiter_s_statement_before_the_reactor_turns
    db = pool(limit: 1)
    reactor do
      active("warm-up") # the monitor connection, opened before it matters
      lease = db.lease # the only connection
      first = queue(db, "select pg_sleep(0.3), 'hand-over-first'")
      second = queue(db, "select 'hand-over-second'")
      lease.release
      stats = db.statistics
      assert_equal [1, 1, 1], stats.values_at(:handed_over, :in_flight, :waiting), stats.inspect
      assert running_without_a_turn?("hand-over-first"), "the first waiter's statement was not written"
      assert_equal "hand-over-first", first.wait.getvalue(0, 1)
      assert_equal "hand-over-second", second.wait.getvalue(0, 0)
    end
    assert_equal 0, db.statistics[:waiting]
  end

  # A statement run alone on a free connection, then a pipeline drained: each gives its
  # connection to the next waiter in the turn its answer is read.
  def test_a_drained_pipeline_carries_the_next_waiter_s_statement_before_the_reactor_turns
    db = pool(limit: 1, pipeline_depth: 1)
    reactor do
      active("warm-up")
      alone = Weft.spawn { db.query("select pg_sleep(0.2)") } # alone on the idle pool
      sleep 0.05
      ahead = queue(db, "select pg_sleep(0.2), 'hand-over-ahead'")
      behind = queue(db, "select pg_sleep(0.3), 'hand-over-behind'")
      alone.wait
      assert running_without_a_turn?("hand-over-ahead"), "the statement run alone gave no hand-over"
      looked = nil
      reader = Weft.spawn do
        ahead.wait # its answer was read in this fiber's turn, which goes on here
        looked = running_without_a_turn?("hand-over-behind")
      end
      reader.wait
      assert looked, "the drained pipeline gave no hand-over"
      assert_equal "hand-over-behind", behind.wait.getvalue(0, 1)
      assert_equal 2, db.statistics[:handed_over]
    end
  end

  # The line's order is kept: the first waiter is served by the hand-over, even when a
  # wake-up was on its way to it; a waiter whose task is being cancelled is passed over, and
  # its statement never runs.
  def test_the_first_waiter_is_served_and_a_cancelled_one_passed_over
    db = pool(limit: 1)
    table = "hand_over_#{Process.pid}"
    db.query("create table #{table} (name text)")
    reactor do
      lease = db.lease
      cancelled = queue(db, "insert into #{table} values ($1)", "cancelled")
      first = queue(db, "insert into #{table} values ($1)", "first")
      second = queue(db, "insert into #{table} values ($1)", "second")
      cancelled.cancel # reaches it on the next turn
      lease.release
      assert_equal 1, db.statistics[:handed_over]
      Weft.gather([first, second])
      cancelled.wait
      assert_predicate cancelled, :cancelled?
    end
    assert_equal %w[first second], db.query("select name from #{table} order by ctid").column_values(0)
  ensure
    db&.query("drop table if exists #{table}")
  end

  # A waiter whose deadline passed (its task still to run) is passed over: the next one gets
  # the connection, and the one passed over gets its DeadlineExceeded. (A Weft.timeout or
  # Timeout.timeout due but not yet raised is not seen: that statement is sent, and abandoned
  # as the caller leaves, as in the test below.)
  def test_a_waiter_past_its_deadline_is_passed_over
    db = pool(limit: 1)
    reactor do
      active("warm-up")
      lease = db.lease
      late = Weft.spawn { Weft.deadline(0.05) { db.query("select 'hand-over-late'") } }
      sleep 0.01
      on_time = queue(db, "select pg_sleep(0.3), 'hand-over-on-time'")
      spin_until = now + 0.1 # the reactor does not turn: the late one cannot leave the line yet
      nil while now < spin_until
      lease.release
      assert running_without_a_turn?("hand-over-on-time"), "the waiter on time was not served"
      assert_raises(Weft::DeadlineExceeded) { late.wait }
      assert_equal "hand-over-on-time", on_time.wait.getvalue(0, 1)
      assert_equal 1, db.statistics[:handed_over]
    end
  end

  # A waiter cancelled after its statement was sent for it abandons it: it is cancelled on the
  # server, and the connection comes back for the next caller.
  def test_a_waiter_cancelled_after_the_hand_over_abandons_its_statement
    db = pool(limit: 1)
    reactor do
      active("warm-up")
      lease = db.lease
      waiter = queue(db, "select pg_sleep(30), 'hand-over-abandoned'")
      lease.release
      assert running_without_a_turn?("hand-over-abandoned")
      waiter.cancel
      assert_nil waiter.wait
      assert_equal "after", Weft.timeout(5) { db.query("select 'after'") }.getvalue(0, 0)
      started = now
      sleep 0.01 until active("hand-over-abandoned").zero? || now - started > 2
      assert_equal 0, active("hand-over-abandoned"), "the abandoned statement still runs"
    end
  end

  # Errors stay with their callers: a statement the server fails, or one libpq refuses to send,
  # raises in its own caller, not in the one that gave the connection back; the next waiter is
  # served.
  def test_errors_of_a_handed_over_statement_go_to_its_caller
    db = pool(limit: 1)
    reactor do
      lease = db.lease
      failing = queue(db, "select 1 / $1::int", 0)
      lease.release # no error here
      assert_raises(PG::DivisionByZero) { failing.wait }

      lease = db.lease
      refused = queue(db, "select $1::text", "nul\0byte")
      after = queue(db, "select 'served'")
      lease.release
      assert_raises(ArgumentError) { refused.wait }
      assert_equal "served", after.wait.getvalue(0, 0)
    end
    assert_equal 0, db.statistics[:waiting]
  end

  # A lease given back with its transaction open is rolled back before the hand-over: the
  # waiter's statement runs outside it, and commits on its own.
  def test_a_statement_handed_a_connection_never_runs_in_the_lease_s_transaction
    db = pool(limit: 1)
    table = "hand_over_tx_#{Process.pid}"
    db.query("create table #{table} (name text)")
    reactor do
      lease = db.lease
      lease.async_exec("begin")
      lease.exec_params("insert into #{table} values ($1)", ["lease"])
      waiter = queue(db, "insert into #{table} values ($1)", "waiter")
      lease.release # with the transaction open: rolled back
      waiter.wait
      assert_equal 1, db.statistics[:handed_over]
    end
    assert_equal %w[waiter], db.query("select name from #{table}").column_values(0)
  ensure
    db&.query("drop table if exists #{table}")
  end
end
