# frozen_string_literal: true

require_relative "../test_helper"
require "weft/postgres"

# While every connection is busy, the connections' time is what limits callers, and a leased
# connection must not sit unused for a turn of the reactor after each of its statements: its
# statements are answered without a turn between them (Pool#await_answer). The reactor is kept
# busy by fibers that each spin for a few milliseconds a turn, as a server's requests do, and
# the tests count turns, so that a slow machine makes them slower but not wrong.
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
