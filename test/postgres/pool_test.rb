# frozen_string_literal: true

require_relative "../test_helper"
require "weft/postgres"

# Weft::Postgres::Pool against the shared throwaway cluster: results, pipelining across
# fibers, per-caller errors, ordering, the depth bound, pins, transactions, timeouts.
class PostgresPoolTest < Minitest::Test
  include Weft::Test::PostgresPools

  def test_query_returns_a_result_with_parameters_and_nulls
    db = pool(limit: 2)
    reactor do
      result = db.query("select $1::int + 1 as n, $2::text as t, $3::text is null as null", 41, "hé", nil)
      assert_kind_of PG::Result, result
      assert_equal [{ "n" => "42", "t" => "hé", "null" => "t" }], result.to_a
    end
  end

  def test_many_fibers_share_few_connections_each_in_its_own_order
    db = pool(limit: 4)
    results = reactor do
      tasks = Array.new(100) do |fiber|
        Weft.spawn { Array.new(20) { |i| db.query("select $1::int", (fiber * 100) + i).getvalue(0, 0).to_i } }
      end
      Weft.gather(tasks)
    end
    results.each_with_index { |values, fiber| assert_equal Array.new(20) { |i| (fiber * 100) + i }, values }
    stats = db.statistics
    assert_operator stats[:connects], :<=, 4
    assert_equal 2000, stats[:queries]
    assert_operator stats[:pipelined], :>, 1900, "few statements were pipelined: #{stats.inspect}"
    assert_operator stats[:max_depth], :>, 1, "statements were not pipelined: #{stats.inspect}"
  end

  def test_without_pressure_statements_run_alone_and_never_queue_behind_a_slow_one
    db = pool(limit: 2)
    reactor do
      slow = Weft.spawn { db.query("select pg_sleep(1)") }
      sleep 0.05
      assert_elapsed_under(0.5) { 20.times { |i| assert_equal i.to_s, db.query("select $1::int", i).getvalue(0, 0) } }
      slow.wait
    end
    assert_equal 0, db.statistics[:pipelined]
  end

  def test_an_error_fails_only_its_own_statement_and_the_next_one_is_correct
    db = pool(limit: 1) # every statement on one connection, in one pipeline
    outcomes = reactor do
      tasks = Array.new(30) do |i|
        Weft.spawn do
          sql = i % 3 == 1 ? "select * from no_such_table_#{i}" : "select $1::int * 2"
          db.query(sql, *(i % 3 == 1 ? [] : [i])).getvalue(0, 0).to_i
        rescue PG::Error => e
          e
        end
      end
      Weft.gather(tasks)
    end
    outcomes.each_with_index do |outcome, i|
      if i % 3 == 1
        assert_kind_of PG::UndefinedTable, outcome
        assert_includes outcome.message, "no_such_table_#{i}"
      else
        assert_equal i * 2, outcome
      end
    end
    assert_equal 1, db.statistics[:connects]
    assert_equal 0, db.statistics[:discarded]
    reactor { assert_equal "ok", db.query("select 'ok'").getvalue(0, 0) }
  end

  # A change of the session made through #query would stay with whichever connection ran it,
  # for every later caller there, out of reach of the caller's next statement: refused outside
  # #with, where it runs on the pinned connection (and the caller can undo it).
  def test_a_change_of_the_session_is_refused_outside_with
    db = pool(limit: 2)
    reactor do
      ["SET search_path TO nowhere", "LISTEN weft_refused", "SELECT pg_advisory_lock(4346)",
       "CREATE TEMP TABLE weft_refused (a int)", "COPY (SELECT 1) TO STDOUT",
       "SELECT set_config('search_path', 'nowhere', false)"].each do |sql|
        error = assert_raises(ArgumentError, sql) { db.query(sql) }
        assert_includes error.message, "Pool#with"
      end
      # set_config(..., false) is a session SET too (a tenant's search_path left on a shared
      # connection for every caller after); an `is_local` the text does not show counts as one.
      error = assert_raises(ArgumentError) { db.query("SELECT set_config('search_path', $1, $2)", "nowhere", "false") }
      assert_includes error.message, "Pool#with"
      assert_equal "nowhere", db.query("SELECT set_config('search_path', 'nowhere', true)").getvalue(0, 0)
      Array.new(4) { Weft.spawn { 5.times { assert_equal "\"$user\", public", db.query("show search_path").getvalue(0, 0) } } }
        .each(&:wait)
      db.with do
        db.query("SELECT set_config('search_path', 'nowhere', false)")
        assert_equal "nowhere", db.query("show search_path").getvalue(0, 0)
        db.query("RESET search_path")
        db.query("SET search_path TO nowhere")
        assert_equal "nowhere", db.query("show search_path").getvalue(0, 0)
        assert_equal "t", db.query("SELECT pg_try_advisory_lock(4346)").getvalue(0, 0)
        db.query("SELECT pg_advisory_unlock(4346)")
        db.query("RESET search_path")
      end
    end
  end

  # The fiber that reads a segment's results settles every statement of it, and a failed one's
  # error is made there: raised in its own caller, it must show that caller's backtrace, not
  # the reader's (which runs another caller's code).
  def test_an_error_carries_its_own_callers_backtrace
    db = pool(limit: 1)
    errors = reactor do
      Array.new(5) do
        readers = Array.new(20) { Weft.spawn { read_the_segment(db) } }
        failing = Weft.spawn { query_a_missing_table(db) }
        Weft.gather(readers)
        failing.wait
      end
    end
    assert_operator db.statistics[:pipelined], :>, 50 # the errors were read by other fibers
    errors.each do |error|
      assert_kind_of PG::UndefinedTable, error
      trace = error.backtrace.first(12).join("\n")
      assert(error.backtrace.any? { |line| line.include?("query_a_missing_table") }, trace)
      refute(error.backtrace.any? { |line| line.include?("read_the_segment") }, trace)
    end
  end

  def read_the_segment(db)
    db.query("select 1")
  end

  def query_a_missing_table(db)
    db.query("select * from no_such_table_for_backtraces")
  rescue PG::Error => e
    e
  end

  # Creates `table` (`columns`), runs the block with 0...count in a fiber each (many
  # statements per segment on a one-connection pool), and drops the table.
  # @return [Array(Array, Array<Integer>)] each fiber's value (the class of the PG::Error it
  #   raised, if it did) and the table's ids, in order
  def segment_outcomes(db, table, columns, count)
    reactor do
      db.query("create table #{table} (#{columns})")
      tasks = Array.new(count) do |i|
        Weft.spawn do
          yield i
        rescue PG::Error => e
          e.class
        end
      end
      [Weft.gather(tasks), db.query("select id from #{table} order by id").column_values(0).map(&:to_i)]
    ensure
      db.query("drop table if exists #{table}")
    end
  end

  # Statements that go out together share a sync point, so PostgreSQL runs them as one
  # transaction: a failing one rolls back the others. Those run again, each committed once.
  def test_statements_rolled_back_with_a_failing_one_are_committed_exactly_once
    db = pool(limit: 1) # every statement on one connection, many in each segment
    table = "weft_segment_rollback_#{Process.pid}"
    outcomes, ids = segment_outcomes(db, table, "id int primary key", 60) do |i|
      i % 5 == 2 ? db.query("select 1 / ($1::int - $1::int)", i) : db.query("insert into #{table} values ($1)", i)
      :ok
    end
    assert_equal Array.new(60) { |i| i % 5 == 2 ? PG::DivisionByZero : :ok }, outcomes
    # A primary key: an insert committed twice would have failed its caller instead.
    assert_equal (0...60).reject { |i| i % 5 == 2 }, ids
    assert_operator db.statistics[:max_depth], :>, 1, "statements were not pipelined"
  end

  # VACUUM cannot run in a transaction with other statements: sent with others, it fails, and
  # is sent again in a segment of its own.
  def test_a_statement_that_cannot_share_a_transaction_runs_in_one_of_its_own
    db = pool(limit: 1)
    statuses = reactor do
      Weft.gather(Array.new(30) { |i| Weft.spawn { (i == 20 ? db.query("vacuum pg_am") : db.query("select $1::int", i)).cmd_status } })
    end
    assert_equal Array.new(30) { |i| i == 20 ? "VACUUM" : "SELECT 1" }, statuses
    assert_operator db.statistics[:max_depth], :>, 1, "statements were not pipelined"
  end

  def test_in_flight_depth_is_bounded
    db = pool(limit: 1, pipeline_depth: 3)
    seen = []
    reactor do
      tasks = Array.new(15) { Weft.spawn { db.query("select pg_sleep(0.01)") } }
      watcher = Weft.spawn do
        until tasks.all?(&:done?)
          seen << db.statistics[:in_flight]
          sleep 0.002
        end
      end
      Weft.gather(tasks)
      watcher.wait
    end
    assert_operator seen.max, :<=, 3
    assert_equal 3, db.statistics[:max_depth]
  end

  def test_slow_statements_overlap_across_connections
    db = pool(limit: 10)
    reactor do
      assert_elapsed_under(2.0) do
        Weft.gather(Array.new(10) { Weft.spawn { db.query("select pg_sleep(0.5)") } })
      end
    end
  end

  def test_without_pipelining_statements_still_overlap
    db = pool(limit: 10, pipelining: false)
    refute db.pipelining?
    reactor do
      assert_elapsed_under(2.0) do
        values = Weft.gather(Array.new(10) { |i| Weft.spawn { db.query("select pg_sleep(0.5), $1::int", i).getvalue(0, 1) } })
        assert_equal (0...10).map(&:to_s), values
      end
    end
    assert_equal 0, db.statistics[:pipelined]
  end

  def test_with_pins_a_connection_out_of_the_shared_set
    db = pool(limit: 2)
    reactor do
      db.with do |conn|
        conn.exec("set application_name = 'pinned'")
        assert_equal "pinned", conn.exec("show application_name").getvalue(0, 0)
        pinned_pid = conn.backend_pid
        others = Weft.gather(Array.new(10) { Weft.spawn { db.query("select pg_backend_pid()").getvalue(0, 0).to_i } })
        refute_includes others, pinned_pid
        assert_equal 1, db.statistics[:pinned]
      end
    end
  end

  def test_a_connection_back_from_pipeline_mode_is_plain_pg_without_singleton_methods
    db = pool(limit: 1)
    reactor do
      Weft.gather(Array.new(20) { |i| Weft.spawn { db.query("select $1::int", i) } })
      assert_operator db.statistics[:pipelined], :>, 10, "the statements were not pipelined"
      db.with do |raw|
        # pg's setnonblocking would have aliased flush, pipeline_sync... on the connection's
        # singleton class, which YJIT does not compile calls on.
        assert_empty raw.singleton_methods
        refute raw.isnonblocking, "sends in plain mode flush, as pg's blocking API does"
        assert_equal "7", raw.exec_params("select $1::int", [7]).getvalue(0, 0)
      end
      assert_equal "8", db.query("select $1::int", 8).getvalue(0, 0)
    end
  end

  def test_inside_with_the_fiber_keeps_its_connection
    db = pool(limit: 2)
    reactor do
      db.query("create table if not exists nest_test (v int)")
      db.query("truncate nest_test")
      db.with do |conn|
        conn.exec("set application_name = 'nested'")
        assert_equal conn.backend_pid, db.with(&:backend_pid)
        assert_equal "nested", db.query("show application_name").getvalue(0, 0)
        db.transaction do
          db.query("insert into nest_test values (1)")
          db.transaction { |inner| inner.exec("insert into nest_test values (2)") } # joins the outer one
          assert_equal "2", db.query("select count(*) from nest_test").getvalue(0, 0)
        end
        assert_raises(RuntimeError) do
          db.transaction do
            db.query("insert into nest_test values (3)")
            raise "inner failure"
          end
        end
        # The failed transaction was rolled back at once; the session goes on.
        assert_equal PG::PQTRANS_IDLE, conn.transaction_status
        assert_equal "2", db.query("select count(*) from nest_test").getvalue(0, 0)
        conn.exec("reset application_name") # leave the session as found
      end
      assert_equal 0, db.statistics[:pinned]
      assert_equal "2", db.query("select count(*) from nest_test").getvalue(0, 0)
    end
  end

  def test_transaction_commits_and_rolls_back
    db = pool(limit: 2)
    reactor do
      db.query("create table if not exists tx_test (v int)")
      db.query("truncate tx_test")
      db.transaction { |conn| conn.exec("insert into tx_test values (1)") }
      assert_raises(RuntimeError) do
        db.transaction do |conn|
          conn.exec("insert into tx_test values (2)")
          raise "boom"
        end
      end
      assert_raises(Weft::Postgres::TransactionRolledBack) do
        db.transaction do |conn|
          conn.exec("insert into tx_test values (3)")
          conn.exec("select 1/0") rescue PG::DivisionByZero # rubocop:disable Style/RescueModifier
        end
      end
      assert_equal [["1"]], db.query("select v from tx_test order by v").values
    end
    assert_equal 0, db.statistics[:discarded]
  end

  def test_cancelled_transaction_rolls_back_cancels_the_statement_and_keeps_the_connection
    db = pool(limit: 1)
    reactor do
      db.query("create table if not exists tx_cancel (v int)")
      db.query("truncate tx_cancel")
      task = Weft.spawn do
        db.transaction do |conn|
          conn.exec("insert into tx_cancel values (1)")
          conn.exec("select pg_sleep(30)")
        end
      end
      sleep 0.2
      assert_elapsed_under(1.5) do
        task.cancel
        assert_nil task.wait
        assert task.cancelled?
      end
      assert_equal "0", db.query("select count(*) from tx_cancel").getvalue(0, 0)
      assert_equal "0", db.query("select count(*) from pg_stat_activity where query like 'select pg_sleep(30)%'").getvalue(0, 0)
    end
    assert_equal 0, db.statistics[:discarded]
  end

  def test_cancelled_pipelined_statement_is_cancelled_on_the_server
    db = pool(limit: 1)
    reactor do
      blocker = Weft.spawn { db.query("select pg_sleep(0.2)") } # alone on the connection
      sleep 0.05
      task = Weft.spawn { db.query("select pg_sleep(30)") } # waits, then goes down the pipeline
      blocker.wait
      sleep 0.1
      assert_equal 1, db.statistics[:in_flight]
      assert_elapsed_under(1.5) do
        task.cancel
        task.wait
      end
      assert task.cancelled?
      activity = db.query("select count(*) from pg_stat_activity where query = 'select pg_sleep(30)' and state = 'active'")
      assert_equal "0", activity.getvalue(0, 0)
      assert_equal "after", db.query("select 'after'").getvalue(0, 0)
    end
    assert_equal 0, db.statistics[:discarded]
  end

  def test_abandoned_statement_behind_others_does_not_disturb_their_results
    db = pool(limit: 1)
    reactor do
      blocker = Weft.spawn { db.query("select pg_sleep(0.2)") } # alone on the connection
      sleep 0.05
      first = Weft.spawn { db.query("select pg_sleep(0.3), 'first'").getvalue(0, 1) }
      abandoned = Weft.spawn { db.query("select 'abandoned'") }
      last = Weft.spawn { db.query("select 'last'").getvalue(0, 0) }
      blocker.wait
      sleep 0.05
      assert_equal 3, db.statistics[:in_flight]
      abandoned.cancel
      assert_equal "first", first.wait
      assert_equal "last", last.wait
      assert abandoned.cancelled?
      assert_equal "again", db.query("select 'again'").getvalue(0, 0)
    end
  end

  # The first caller waiting on a shared connection reads the results for those behind it.
  # Interrupted (here, cancelled) while they still wait, it hands the reading on to one of
  # them: nobody is left waiting with nobody reading.
  def test_an_interrupted_reader_hands_the_reading_on
    db = pool(limit: 1)
    reactor do
      blocker = Weft.spawn { db.query("select pg_sleep(0.2)") } # alone on the connection
      sleep 0.05
      reader = Weft.spawn { db.query("select pg_sleep(0.3), 'reader'") } # first in the pipeline
      # Still running when the reader's cancelled statement has come back: read by someone else.
      behind = Array.new(4) { |i| Weft.spawn { db.query("select $1::int, pg_sleep(0.05)", i).getvalue(0, 0).to_i } }
      blocker.wait
      sleep 0.05
      assert_equal 5, db.statistics[:in_flight]
      reader.cancel
      assert_equal [0, 1, 2, 3], Weft.timeout(3) { Weft.gather(behind) }
      assert_predicate reader, :cancelled?
      assert_equal "after", db.query("select 'after'").getvalue(0, 0)
    ensure
      behind&.each(&:cancel) # after a lost hand-over nothing else would end them
    end
    assert_equal 0, db.statistics[:discarded]
  end

  def test_pin_reads_out_statements_whose_callers_all_left
    db = pool(limit: 1)
    reactor do
      blocker = Weft.spawn { db.query("select pg_sleep(0.2)") } # alone on the connection
      sleep 0.05
      head = Weft.spawn { db.query("select pg_sleep(0.3)") } # these two wait, then share it
      behind = Weft.spawn { db.query("select 'behind'") }
      blocker.wait
      sleep 0.05
      [head, behind].each(&:cancel) # two in flight: no server cancel, nobody left reading
      Weft.gather([head, behind], collect: true)
      assert_equal 2, db.statistics[:in_flight]
      pid = assert_elapsed_under(2.0) { db.with(&:backend_pid) }
      assert_kind_of Integer, pid
      assert_equal "ok", db.query("select 'ok'").getvalue(0, 0)
    end
    assert_equal 0, db.statistics[:discarded]
  end

  def test_connection_killed_with_statements_in_flight_fails_them_clearly
    db = pool(limit: 1)
    reactor do
      pid = db.query("select pg_backend_pid()").getvalue(0, 0)
      blocker = Weft.spawn { db.query("select pg_sleep(0.2)") } # alone on the connection
      sleep 0.05
      running = Weft.spawn { db.query("select pg_sleep(5)") } # these wait, then are pipelined
      queued = Array.new(3) { |i| Weft.spawn { db.query("select $1::int", i) } }
      blocker.wait
      sleep 0.1
      assert_equal 4, db.statistics[:in_flight]
      postgres.psql("select pg_terminate_backend(#{pid})")
      assert_raises(PG::AdminShutdown, PG::ConnectionBad) { running.wait }
      queued.each do |task|
        error = assert_raises(Weft::Postgres::ConnectionError) { task.wait }
        assert_includes error.message, "#{postgres.host}:#{postgres.port}"
      end
      refute_equal pid, db.query("select pg_backend_pid()").getvalue(0, 0)
    end
  end

  def test_timeout_around_a_query_leaves_the_pool_healthy
    db = pool(limit: 1)
    reactor do
      assert_raises(Weft::TimeoutError) { Weft.timeout(0.2) { db.query("select pg_sleep(30)") } }
      assert_elapsed_under(1.0) { assert_equal "1", db.query("select 1").getvalue(0, 0) }
    end
  end

  def test_statement_timeout_option
    db = pool(limit: 1, statement_timeout: 0.2)
    reactor do
      error = assert_elapsed_under(1.5) { assert_raises(PG::QueryCanceled) { db.query("select pg_sleep(5)") } }
      assert_match(/statement timeout/, error.message)
      assert_equal "fine", db.query("select 'fine'").getvalue(0, 0)
      db.with { |conn| assert_raises(PG::QueryCanceled) { conn.exec("select pg_sleep(5)") } }
    end
  end

  def test_acquire_timeout_raises_pool_timeout
    db = pool(limit: 1, acquire_timeout: 0.2)
    reactor do
      holder = Weft.spawn { db.with { sleep 1 } }
      sleep 0.05 # let it pin the only connection
      error = assert_elapsed_under(0.8) { assert_raises(Weft::Postgres::PoolTimeout) { db.with {} } }
      assert_match(/within 0.2s/, error.message)
      assert_match(/every connection is held for a transaction, a #with or #lease block/, error.message)
      assert_raises(Weft::Postgres::PoolTimeout) { db.query("select 1") }
      holder.wait
      assert_equal "1", db.query("select 1").getvalue(0, 0)
    end
  end

  def test_pin_waits_for_a_shared_connection_to_drain
    db = pool(limit: 1)
    reactor do
      busy = Array.new(5) { Weft.spawn { db.query("select pg_sleep(0.1)") } }
      pid = assert_elapsed_under(3.0) { db.with(&:backend_pid) }
      assert_kind_of Integer, pid
      Weft.gather(busy)
    end
  end

  def test_query_refuses_to_open_a_transaction
    db = pool(limit: 1)
    reactor do
      assert_raises(ArgumentError) { db.query("BEGIN") }
      assert_raises(ArgumentError) { db.query("  start transaction isolation level serializable") }
      assert_raises(ArgumentError) { db.query("/* app:web */ BEGIN") }
    end
  end

  # A setting of the transaction under way (SET LOCAL, set_config(..., true)) sent outside a
  # transaction changes nothing on a connection of its own (PostgreSQL warns); in a pipeline
  # segment it held for the statements of other callers after it there (the segment's implicit
  # transaction). It runs in a segment of its own, so its answer is as it would be alone.
  def test_a_transaction_setting_does_not_reach_other_callers_statements
    db = pool(limit: 1)
    seen = reactor do
      Array.new(5) do # rounds of 30 fibers, two of which send a setting amid the others' statements
        settings = ["SET LOCAL statement_timeout = 4325", "SELECT set_config('statement_timeout', '4325', true)"]
        tasks = Array.new(30) do |fiber|
          Weft.spawn do
            next db.query(settings[fiber / 15]) && nil if [5, 15].include?(fiber)
            db.query("SELECT current_setting('statement_timeout')").getvalue(0, 0)
          end
        end
        tasks.map(&:wait).compact
      end.flatten
    end
    assert_operator db.statistics[:pipelined], :>, 100, "the statements were not pipelined"
    assert_equal({ "0" => 140 }, seen.tally)
  end

  # COMMIT, END, ROLLBACK and ABORT end the transaction they run in: in a pipeline segment,
  # its implicit one, which the other callers' statements of the segment share. A ROLLBACK
  # there undid the statements before it (whose callers had their results: they were lost);
  # a COMMIT committed them, and when a statement after it failed, the segment's other
  # statements were sent again (committed twice). Sent alone in a segment they end nothing,
  # as on a connection of their own (PostgreSQL warns that no transaction is in progress).
  def test_a_commit_or_rollback_ends_no_other_callers_statements
    db = pool(limit: 1) # every statement on one connection, many in each segment
    table = "weft_segment_end_#{Process.pid}"
    ends = ["ROLLBACK", "commit", "/* app */ ABORT", "END", "rollback"]
    tags = ["ROLLBACK", "COMMIT", "ROLLBACK", "COMMIT", "ROLLBACK"] # what PostgreSQL answers each
    # No key: an insert committed twice shows.
    outcomes, ids = segment_outcomes(db, table, "id int", 50) do |i|
      case i % 10
      when 4 then db.query(ends[i / 10]).cmd_status
      when 8 then db.query("select 1 / ($1::int - $1::int)", i)
      else db.query("insert into #{table} values ($1)", i) && :ok
      end
    end
    expected = Array.new(50) { |i| { 4 => tags[i / 10], 8 => PG::DivisionByZero }.fetch(i % 10, :ok) }
    assert_equal expected, outcomes
    assert_equal (0...50).reject { |i| [4, 8].include?(i % 10) }, ids, "each insert committed once"
    assert_operator db.statistics[:max_depth], :>, 1, "statements were not pipelined"
  end

  def test_old_option_names_still_work
    db = nil
    capture_io { db = pool(size: 1, checkout_timeout: 0.2, max_lifetime: 0.2) }
    assert_equal 1, db.limit
    reactor do
      first = db.query("select pg_backend_pid()").getvalue(0, 0)
      holder = Weft.spawn { db.with { sleep 0.5 } }
      sleep 0.05 # let it pin the only connection
      error = assert_raises(Weft::Postgres::PoolTimeout) { db.with {} }
      assert_match(/within 0.2s/, error.message)
      holder.wait
      refute_equal first, db.query("select pg_backend_pid()").getvalue(0, 0), "max_lifetime: did not retire it"
    end
  end

  def test_max_age_and_idle_timeout_replace_connections
    db = pool(limit: 1, max_age: 0.2)
    reactor do
      first = db.query("select pg_backend_pid()").getvalue(0, 0)
      sleep 0.3
      refute_equal first, db.query("select pg_backend_pid()").getvalue(0, 0)
    end
    idle = pool(limit: 1, idle_timeout: 0.1)
    reactor do
      idle.query("select 1")
      sleep 0.2
      idle.reap
      assert_equal 0, idle.statistics[:size]
    end
  end

  def test_close_idle_closes_free_connections_and_the_pool_goes_on
    db = pool(limit: 2)
    reactor do
      db.with do
        Weft.spawn { db.query("select 1") }.wait
        db.close_idle # the free one goes; the pinned one stays
        assert_equal 1, db.statistics[:size]
      end
      db.close_idle
      assert_equal 0, db.statistics[:size]
      assert_equal "1", db.query("select 1").getvalue(0, 0)
      refute db.closed?
    end
  end

  # A library's own connection class (Sequel's adapter subclasses PG::Connection), used for
  # shared and pinned statements alike.
  def test_connector_opens_the_connections
    conninfos = []
    subclass = Class.new(PG::Connection)
    db = pool(limit: 2, connector: ->(conninfo) { conninfos << conninfo; subclass.new(conninfo) })
    reactor do
      Weft.gather(Array.new(20) { |i| Weft.spawn { assert_equal i.to_s, db.query("select $1::int", i).getvalue(0, 0) } })
      db.with { |conn| assert_kind_of subclass, conn }
    end
    assert_equal 2, conninfos.size
    assert_operator db.statistics[:pipelined], :>, 0
    assert_match(/application_name='weft'/, conninfos.first)
  end

  def test_a_connection_killed_while_idle_is_replaced
    db = pool(limit: 1)
    reactor do
      pid = db.query("select pg_backend_pid()").getvalue(0, 0)
      postgres.psql("select pg_terminate_backend(#{pid})")
      sleep 0.1
      refute_equal pid, db.query("select pg_backend_pid()").getvalue(0, 0)
      assert_equal 1, db.statistics[:discarded]
    end
  end

  def test_database_url_is_the_default
    previous = ENV["DATABASE_URL"]
    ENV["DATABASE_URL"] = postgres.url
    db = Weft::Postgres::Pool.new(limit: 1).tap { |created| @pools << created }
    reactor { assert_equal "1", db.query("select 1").getvalue(0, 0) }
  ensure
    ENV["DATABASE_URL"] = previous
  end

  def test_usable_from_plain_threads
    db = pool(limit: 3)
    threads = Array.new(4) do |t|
      Thread.new { Array.new(25) { |i| db.query("select $1::int", (t * 100) + i).getvalue(0, 0).to_i } }
    end
    threads.each_with_index { |thread, t| assert_equal Array.new(25) { |i| (t * 100) + i }, thread.value }
  end

  def test_statistics
    db = pool(limit: 3)
    reactor { Weft.gather(Array.new(6) { Weft.spawn { db.query("select 1") } }) }
    stats = db.statistics
    assert_equal 3, stats[:limit]
    assert_equal 6, stats[:queries]
    assert_equal 0, stats[:busy]
    assert_equal stats[:size], stats[:idle]
  end

  def test_close_closes_every_free_connection
    db = Weft::Postgres::Pool.new(postgres.url, limit: 5, application_name: "weft-close-test") # closed here
    reactor { Weft.gather(Array.new(5) { Weft.spawn { db.with { |conn| conn.exec("select pg_sleep(0.05)") } } }) }
    assert_equal 5, db.statistics[:idle]
    db.close
    assert_raises(Weft::Postgres::PoolClosed) { db.statistics }
    started = now
    sleep 0.01 while backends("weft-close-test").positive? && now - started < 5
    assert_equal 0, backends("weft-close-test")
  end

  private

  def backends(application_name)
    postgres.psql("select count(*) from pg_stat_activity where application_name = '#{application_name}'")
            .first["count"].to_i
  end
end
