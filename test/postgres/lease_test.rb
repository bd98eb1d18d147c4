# frozen_string_literal: true

require_relative "../test_helper"
require "weft/postgres"

# Pool#lease: a connection held across calls, given back clean, and with reset_session: true
# cleared of the holder's session state and set up again by on_connect.
class PostgresLeaseTest < Minitest::Test
  include Weft::Test::PostgresPools

  def test_a_lease_holds_one_connection_until_released_and_the_pool_gets_it_back
    db = pool(limit: 1, acquire_timeout: 0.3)
    reactor do
      lease = db.lease
      pid = lease.raw.exec("select pg_backend_pid()").getvalue(0, 0)
      assert_equal pid, lease.raw.exec("select pg_backend_pid()").getvalue(0, 0)
      assert_raises(Weft::Postgres::PoolTimeout) { db.query("select 1") } # the only connection is leased
      lease.release
      assert lease.released?
      assert_raises(Weft::Postgres::PoolClosed) { lease.raw }
      assert_equal pid, db.query("select pg_backend_pid()").getvalue(0, 0)
      lease.release # a second release does nothing
      assert_equal 0, db.statistics[:pinned]
    end
  end

  def test_a_transaction_left_open_is_rolled_back_when_released
    db = pool(limit: 1)
    reactor do
      lease = db.lease
      lease.raw.exec("BEGIN")
      lease.raw.exec("select 1")
      lease.release
      assert_equal "0", db.query("select count(*) from pg_stat_activity where state like 'idle in transaction%'")
                          .getvalue(0, 0)
      assert_equal 0, db.statistics[:pinned]
    end
  end

  def test_reset_session_clears_session_state_and_runs_on_connect_again
    setups = 0
    db = pool(limit: 1, on_connect: lambda { |conn|
      setups += 1
      conn.exec("set application_name to 'set-up'")
    })
    reactor do
      lease = db.lease
      lease.raw.exec("set search_path to nowhere")
      lease.raw.exec("select pg_advisory_lock(4242)")
      lease.release(reset_session: true)
      assert_equal 2, setups
      assert_equal "\"$user\", public", db.query("show search_path").getvalue(0, 0)
      assert_equal "set-up", db.query("show application_name").getvalue(0, 0)
      assert_equal "0", db.query("select count(*) from pg_locks where locktype = 'advisory'").getvalue(0, 0)
      assert_equal 1, db.statistics[:connects], "the connection was reused, not replaced"
    end
  end
end
