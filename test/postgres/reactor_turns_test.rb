# frozen_string_literal: true

require_relative "../test_helper"
require "weft/postgres"

# While every connection is busy, the connections' time is what limits callers, and a
# connection must not sit unused for turns of the reactor: when one comes free, the statements
# waiting in line for a slot go down it in the same turn (Pool#place, #serve_slot_waiters), and
# a lease's statements are answered without a turn between them (Pool#await_answer). The
# reactor is kept busy by fibers that each spin for a few milliseconds a turn, as a server's
# requests do, and the tests count turns, so that a slow machine makes them slower but not
# wrong.
class PostgresReactorTurnsTest < Minitest::Test
  include Weft::Test::PostgresPools

  # Busy fibers, and the CPU seconds each spends per turn of the reactor.
  BUSY = 4
  SPIN = 0.003

  # Runs the block while BUSY fibers keep the reactor's turns long; the block gets a lambda
  # that tells how many turns have passed so far (one busy fiber runs once a turn).
  def with_busy_reactor
    turns = 0
    stop = false
    busy = Array.new(BUSY) do |index|
      Weft.spawn do
        until stop
          started = now
          nil while now - started < SPIN
          turns += 1 if index.zero?
          sleep 0 # the next turn
        end
      end
    end
    sleep 0 # let them start
    yield -> { turns }
  ensure
    stop = true
    busy&.each(&:wait)
  end

  def test_statements_waiting_for_a_slot_all_go_down_a_connection_that_comes_free_in_the_same_turn
    db = pool(limit: 1)
    reactor do
      with_busy_reactor do |turns|
        blocker = Weft.spawn do
          db.query("select pg_sleep(0.2)") # alone on the only connection
          turns.call
        end
        sleep 0.05
        waiting = Array.new(20) do |index|
          Weft.spawn { [db.query("select $1::int", index).getvalue(0, 0).to_i, turns.call] }
        end
        sleep 0.05
        assert_equal 20, db.statistics[:waiting], "the 20 statements did not queue for a slot"
        freed_at = blocker.wait
        results = Weft.gather(waiting)
        assert_equal (0...20).to_a, results.map(&:first)
        took = results.map(&:last).max - freed_at
        # Placed as the connection came back: a turn to wake, one for the answer to come, one
        # for the other callers to take theirs. Woken one per turn to place themselves, the
        # 20 took over 20 turns.
        assert_operator took, :<=, 6, "the last of the 20 statements came back #{took} turns after the connection"
      end
    end
    assert_equal 0, db.statistics[:busy]
  end

  def test_a_caller_interrupted_after_its_statement_was_placed_for_it_abandons_the_statement
    db = pool(limit: 1)
    reactor do
      victim = nil
      blocker = Weft.spawn do
        db.query("select pg_sleep(0.2)")
        victim.cancel # its statement was placed as the connection came back; it has not woken yet
      end
      sleep 0.05
      victim = Weft.spawn { db.query("select pg_sleep(5), 'placed-then-cancelled'") }
      sleep 0.05
      blocker.wait
      victim.wait
      assert victim.cancelled?
      assert_gone_from_server("placed-then-cancelled", within: 2.0)
      assert_equal "1", db.query("select 1").getvalue(0, 0)
    end
    assert_equal 0, db.statistics[:discarded]
  end

  def test_a_lease_s_statements_take_no_turn_of_the_reactor_while_connections_are_short
    db = pool(limit: 1)
    reactor do
      lease = db.lease # the only connection: callers that came now would wait
      with_busy_reactor do |turns|
        before = turns.call
        20.times { |index| assert_equal index.to_s, lease.exec_params("select $1::int", [index]).getvalue(0, 0) }
        took = turns.call - before
        # A turn each, with a reactor wait per answer; the poll on the thread has a moment's
        # limit (a loaded machine may answer later), so some turns are allowed.
        assert_operator took, :<, 10, "20 statements on the lease took #{took} turns"
      end
    ensure
      lease&.release
    end
  end

  def test_a_lease_s_statements_wait_on_the_reactor_while_connections_are_to_be_had
    db = pool(limit: 2)
    reactor do
      lease = db.lease # one connection left: nobody waits
      with_busy_reactor do |turns|
        before = turns.call
        20.times { |index| lease.exec_params("select $1::int", [index]) }
        took = turns.call - before
        assert_operator took, :>=, 15, "20 statements on the lease took only #{took} turns: the reactor was held"
      end
    ensure
      lease&.release
    end
  end

  def test_lease_statements_raise_the_server_s_errors_and_the_simple_protocol_gives_the_last_result
    db = pool(limit: 1)
    reactor do
      lease = db.lease
      error = assert_raises(PG::UndefinedTable) { lease.exec_params("select * from no_such_table", []) }
      assert_match(/no_such_table/, error.message)
      assert_equal "2", lease.async_exec("select 1; select 2").getvalue(0, 0)
      assert_equal "hi", lease.exec_params("select $1::text", ["hi"]).getvalue(0, 0)
      lease.release
      assert_raises(Weft::Postgres::PoolClosed) { lease.exec_params("select 1", []) }
    end
  end
end
