# frozen_string_literal: true

require_relative "../test_helper"
require "weft/postgres"

# Where Pool#query sends a statement when connections are shared: never behind a statement the
# pool has seen run long while another connection can take it (head-of-line blocking).
class PostgresRoutingTest < Minitest::Test
  include Weft::Test::PostgresPools

  SLOW = "select pg_sleep(0.4), 'routing-slow'"

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
      sleep 0.1
      assert_equal 2, db.statistics[:shared], "the short statements were not pipelined"
      slow_started = now
      Weft.spawn { db.query(SLOW) }.wait
      slow_took = now - slow_started
      stop = true
      Weft.gather(workers)
      during = latencies.select { |started, _| started >= slow_started && started < slow_started + slow_took }
      assert_operator during.size, :>, 40, "too few short statements ran meanwhile"
      worst = during.map(&:last).max
      assert_operator worst, :<, 0.2, "a short statement waited #{worst}s behind the slow one"
    end
    assert_equal 0, db.statistics[:discarded]
  end
end
