# frozen_string_literal: true

require_relative "../test_helper"
require "etc"
require "weft/postgres"

# On a machine whose cores are all taken by other processes the server is late with every
# statement (a backend waits for a core), and a short statement must not be marked slow for it
# (and then kept apart from the others for as long as the load lasts), while a long one still
# is (docs/postgres.md, "Routing"; Weft::Postgres::CoreWait).
class PostgresSlowStatementsLoadTest < Minitest::Test
  include Weft::Test::PostgresPools

  LONG = Weft::Postgres::SlowStatements::LONG

  # Runs the block beside four CPU-bound processes per core (one more than the cores held up
  # too few statements on a quiet machine).
  def beside_cpu_hogs
    pids = Array.new(Etc.nprocessors * 4) { Process.spawn("sh", "-c", "while :; do :; done") }
    sleep 0.2 # the hogs take the cores
    yield
  ensure
    pids&.each { |pid| Process.kill(:KILL, pid) }
    pids&.each { |pid| Process.wait(pid) }
  end

  def known_slow?(db, sql)
    db.instance_variable_get(:@slow_statements).slow?(sql)
  end

  # One caller, so each statement gets a free connection to itself with nothing else answered
  # meanwhile: nothing to compare it with but the machine's load. Before CoreWait, 9-15
  # `select 1` markings in 3 s of this (bench/results/postgres-ruby-3.3.md).
  def test_a_short_statement_alone_on_a_loaded_machine_is_not_marked_and_a_long_one_is
    skip "no scheduler statistics here (#{Weft::Postgres::CoreWait::SCHEDSTAT})" unless File.readable?(Weft::Postgres::CoreWait::SCHEDSTAT)
    db = pool(limit: 2)
    latencies = []
    slow = "select pg_sleep(0.2), 'loaded-machine'"
    beside_cpu_hogs do
      reactor do
        until_at = now + 2.5
        while now < until_at
          started = now
          db.query("select 1")
          latencies << now - started
        end
        short_marked = db.statistics[:slow_marked]
        held_up = latencies.count { |latency| latency >= LONG }
        # The kernel favours a process that mostly sleeps (this one) over CPU-bound ones: on a
        # machine otherwise quiet the hogs often hold up no statement at all (0-4 of 10-28
        # thousand, 2026-12-07), and then there is nothing to test here (SlowStatementsTest
        # covers the rule with a load share of its own).
        skip "the CPU hogs held up #{held_up} of #{latencies.size} statements here: nothing to test" if held_up < 5
        assert_operator short_marked, :<=, 1, "select 1 was marked slow #{short_marked} times beside the CPU hogs"
        # Loaded, it may be suspect only at its first trip (nothing to compare it with).
        3.times { db.query(slow) unless known_slow?(db, slow) }
        assert known_slow?(db, slow), "pg_sleep(0.2) was not marked by its third trip beside the CPU hogs"
      end
    end
  end
end
