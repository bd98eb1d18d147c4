# frozen_string_literal: true

require_relative "../test_helper"
require "weft/postgres"

# Opening connections in Weft::Postgres::Pool: a connect is not bound to the deadline of the
# caller that began it. A caller that gives up stops waiting; the connect goes on, and the
# connection it makes serves the next caller. Otherwise a pool under callers with short
# deadlines (after PostgreSQL restarted, say) starts connect after connect and finishes none.
class PostgresConnectTest < Minitest::Test
  include Weft::Test::PostgresPools

  # A connector that takes `delay` seconds before connecting (a server slow to accept), then
  # raises `error` if given. Counts the connects it began.
  class SlowConnector
    attr_reader :begun

    def initialize(delay, error: nil)
      @delay = delay
      @error = error
      @begun = 0
    end

    def call(conninfo)
      @begun += 1
      sleep(@delay)
      raise @error if @error
      PG.connect(conninfo)
    end
  end

  def test_a_connect_outlives_the_deadline_of_the_caller_that_began_it
    connector = SlowConnector.new(0.3)
    db = pool(limit: 2, connector: connector)
    reactor do
      outcome, took = timed { Weft.deadline(0.05) { db.query("select 1") } }
      assert_kind_of Weft::DeadlineExceeded, outcome
      assert_operator took, :<, 0.2, "the caller waited for the connect past its deadline"
      sleep(0.5)
      stats = db.statistics
      assert_equal 1, stats[:connects]
      assert_equal 1, stats[:idle], "the finished connection waits for the next caller"
      value, took = timed { Weft.deadline(0.05) { db.query("select 42").getvalue(0, 0) } }
      assert_equal "42", value
      assert_operator took, :<, 0.05
      assert_equal 1, connector.begun, "the next caller connected again"
    end
  end

  def test_callers_with_short_deadlines_get_connections_once_connects_finish
    connector = SlowConnector.new(0.2)
    db = pool(limit: 2, connector: connector)
    reactor do
      # Forty callers over 0.4 s, each willing to wait 50 ms: none can wait for a connect.
      callers = 40.times.map do |i|
        Weft.spawn do
          sleep(i * 0.01)
          Weft.deadline(0.05) { db.query("select 1").getvalue(0, 0) }
        rescue Weft::DeadlineExceeded
          :gave_up
        end
      end
      outcomes = callers.map(&:wait)
      assert_includes outcomes, "1", "no caller was served once the connects had finished"
      assert_operator connector.begun, :<=, 2, "connects beyond the limit"
      assert_equal connector.begun, db.statistics[:connects]
      assert_equal "1", Weft.deadline(0.05) { db.query("select 1").getvalue(0, 0) }
    end
  end

  def test_a_failed_connect_is_the_callers_error_and_frees_its_place
    db = pool(limit: 1, connector: SlowConnector.new(0, error: PG::ConnectionBad.new("server refused")))
    reactor do
      error = assert_raises(Weft::Postgres::ConnectionError) { db.query("select 1") }
      assert_match(/server refused/, error.message)
      assert_equal 0, db.statistics[:size]
    end
  end

  def test_a_connect_that_fails_after_its_caller_gave_up_frees_its_place
    connector = SlowConnector.new(0.2, error: PG::ConnectionBad.new("server refused"))
    db = pool(limit: 1, connector: connector)
    reactor do
      outcome, = timed { Weft.deadline(0.05) { db.query("select 1") } }
      assert_kind_of Weft::DeadlineExceeded, outcome
      assert_equal 1, db.statistics[:size], "the connect under way counts toward the limit"
      sleep(0.4)
      assert_equal 0, db.statistics[:size]
      assert_raises(Weft::Postgres::ConnectionError) { db.query("select 1") }
      assert_equal 2, connector.begun
    end
  end

  def test_a_connect_finishing_after_the_pool_closed_is_closed
    raws = []
    connector = lambda do |conninfo|
      sleep(0.2)
      PG.connect(conninfo).tap { |raw| raws << raw }
    end
    db = pool(limit: 1, connector: connector)
    reactor do
      outcome, = timed { Weft.deadline(0.05) { db.query("select 1") } }
      assert_kind_of Weft::DeadlineExceeded, outcome
      @pools.delete(db).close
      sleep(0.4)
      assert_equal 1, raws.size
      assert_predicate raws.first, :finished?, "the connection made for a closed pool stayed open"
    end
  end

  def test_outside_a_reactor_a_timed_out_caller_leaves_the_connection_to_the_next
    connector = SlowConnector.new(0.3)
    db = pool(limit: 1, connector: connector)
    assert_raises(Weft::DeadlineExceeded) { Weft.deadline(0.05) { db.query("select 1") } }
    sleep(0.5)
    assert_equal "1", db.query("select 1").getvalue(0, 0)
    assert_equal 1, connector.begun
  end
end
