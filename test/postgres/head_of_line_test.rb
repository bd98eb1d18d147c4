# frozen_string_literal: true

require_relative "../test_helper"
require "weft/postgres"

# A statement whose caller times out or is cancelled must not hold up the statements queued
# behind it on the same connection: the pool cancels it on the server and the others run on.
# Measured against the real server: the callers' times, the statements' results, and
# pg_stat_activity (read on a connection of its own) for statements left running.
class PostgresHeadOfLineTest < Minitest::Test
  # How late after its timeout a caller may get the error (a loaded machine: generous).
  LATE = 0.3

  def setup
    @pools = []
    @monitor = PG.connect(postgres.conninfo)
  end

  def teardown
    @pools.each(&:close)
    @monitor&.close
  end

  def pool(**options)
    Weft::Postgres::Pool.new(postgres.url, **options).tap { |created| @pools << created }
  end

  def reactor(seconds = 30, &block)
    Weft.run { Weft.timeout(seconds, &block) }
  end

  def now
    Weft::Timers.now
  end

  # Statements running on the server whose text contains `tag` (passed as a parameter, so this
  # query does not count itself).
  def active(tag)
    @monitor.exec_params(<<~SQL, [tag]).getvalue(0, 0).to_i
      select count(*) from pg_stat_activity
       where state = 'active' and pid <> pg_backend_pid() and position($1 in query) > 0
    SQL
  end

  def assert_gone_from_server(tag, within: 2.0)
    started = now
    sleep 0.02 while active(tag).positive? && now - started < within
    assert_equal 0, active(tag), "a statement tagged #{tag} still runs on the server after #{within}s"
  end

  # Fills the only connection with a statement running alone, so that the statements spawned
  # next wait and then go down one pipeline together, in spawn order.
  def occupy(db, seconds = 0.1)
    blocker = Weft.spawn { db.query("select pg_sleep(#{seconds})") }
    sleep 0.02
    blocker
  end

  # One caller times out on a 30 s statement; 20 callers wait behind it on the one connection.
  # `pipelined`: they are all in the connection's pipeline, the slow one at its head; else the
  # slow one runs alone on the connection and the others wait for the connection itself.
  def run_twenty_behind_a_timed_out_caller(db, tag, pipelined:)
    blocker = occupy(db) if pipelined
    slow = Weft.spawn { timed { Weft.timeout(0.5) { db.query("select pg_sleep(30), '#{tag}'") } } }
    sleep 0.01 unless pipelined # it takes the connection first
    behind = Array.new(20) { |i| Weft.spawn { timed { db.query("select 1, $1::int", i).getvalue(0, 1).to_i } } }
    started = now
    blocker&.wait
    outcome, took = slow.wait
    assert_kind_of Weft::TimeoutError, outcome
    assert_operator took, :<, 0.5 + LATE, "the timed-out caller waited #{took}s"
    results = Weft.gather(behind)
    total = now - started
    assert_equal (0...20).to_a, results.map(&:first)
    assert_operator total, :<, 3.0, "the 20 statements behind it took #{total}s"
    if pipelined
      assert_operator db.statistics[:max_depth], :>=, 21, "the statements were not pipelined together"
    end
    assert_equal "after", db.query("select 'after'").getvalue(0, 0)
    assert_gone_from_server(tag)
    [took, total, results.map(&:last).max]
  end

  def test_twenty_statements_pipelined_behind_a_timed_out_one_finish_promptly
    db = pool(size: 1)
    reactor { run_twenty_behind_a_timed_out_caller(db, "hol-pipelined", pipelined: true) }
    assert_equal 0, db.statistics[:discarded]
    assert_equal 0, db.statistics[:busy]
  end

  def test_twenty_statements_waiting_for_a_timed_out_ones_connection_finish_promptly
    db = pool(size: 1)
    reactor { run_twenty_behind_a_timed_out_caller(db, "hol-alone", pipelined: false) }
    assert_equal 0, db.statistics[:discarded]
    assert_equal 0, db.statistics[:busy]
  end

  # Three callers a second time out on 30 s statements, for 4 s, while 20 fibers run short
  # statements on the same 4 connections: every quarter second some of those finish (without
  # cancellation the slow statements would hold every connection within 2 s: throughput 0).
  def test_three_timeouts_a_second_do_not_starve_other_statements
    db = pool(size: 4)
    reactor do
      finished = []
      stop = false
      workers = Array.new(20) do |i|
        Weft.spawn do
          until stop
            db.query("select $1::int", i)
            finished << now
          end
        end
      end
      started = now
      slow = Array.new(12) do |i|
        sleep((started + (i / 3.0)) - now) if started + (i / 3.0) > now
        Weft.spawn { timed { Weft.timeout(0.5) { db.query("select pg_sleep(30), 'hol-storm'") } } }
      end
      sleep((started + 4.5) - now)
      stop = true
      Weft.gather(workers)
      slow.each do |task|
        outcome, took = task.wait
        assert_kind_of Weft::TimeoutError, outcome
        assert_operator took, :<, 0.5 + LATE
      end
      windows = (0...18).map do |w|
        finished.count { |at| at >= started + (w * 0.25) && at < started + ((w + 1) * 0.25) }
      end
      assert_operator windows.min, :>, 0, "a quarter second with no statement finished: #{windows.inspect}"
      assert_gone_from_server("hol-storm")
      assert_equal "after", db.query("select 'after'").getvalue(0, 0)
      puts "statements per 0.25 s: #{windows.inspect}" if ENV["VERBOSE_BENCH"]
    end
    assert_equal 0, db.statistics[:discarded]
  end
end
