# frozen_string_literal: true

require_relative "../test_helper"
require "pg"

# The core alone (no Weft::Postgres) makes plain `pg` connections concurrent: pg >= 1.3 waits
# on its socket through the fiber scheduler.
class PgConcurrencyTest < Minitest::Test
  def test_ten_connections_sleeping_one_second_overlap
    conninfo = postgres.conninfo
    # One after another they take 10 s; together 1 s plus ten connects. The bound leaves room
    # for the connects on a loaded machine (1.76 s once beside two valgrind runs).
    results = assert_elapsed_under(4) do
      Weft.run do
        Weft.map(1..10) do |i|
          connection = PG.connect(conninfo)
          begin
            connection.exec_params("select pg_sleep(1), $1::int as i", [i]).getvalue(0, 1).to_i
          ensure
            connection.close
          end
        end
      end
    end
    assert_equal (1..10).to_a, results
  end

  def test_a_query_can_be_cut_short_by_a_timeout
    connection = PG.connect(postgres.conninfo)
    outcome = assert_elapsed_under(3) do # the statement alone takes 5 s
      Weft.run do
        Weft.timeout(0.2) { connection.exec("select pg_sleep(5)") }
      rescue Weft::TimeoutError
        connection.cancel # tell the server too, then drain what is left
        connection.get_last_result rescue PG::QueryCanceled
        :timed_out
      end
    end
    assert_equal :timed_out, outcome
    assert_equal "1", connection.exec("select 1").getvalue(0, 0)
  ensure
    connection&.close
  end
end
