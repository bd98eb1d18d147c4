# frozen_string_literal: true

require_relative "../test_helper"
require "weft/postgres/statement_scope"

# Which SQL texts may share a connection (Weft::Postgres::StatementScope, which Pool#query and
# the ORM adapters ask): the weft_postgresql adapter sends through the shared pool's extended
# protocol one statement that reads or writes rows, with semicolons only inside quoting.
class PostgresStatementScopeTest < Minitest::Test
  SCOPE = Weft::Postgres::StatementScope

  def test_one_data_statement_with_semicolons_only_inside_quoting
    [
      "SELECT 1", "SELECT 1;\n", "select $1", "WITH a AS (SELECT 1) SELECT * FROM a",
      "/* application:app */ UPDATE t SET a = 'it''s;'", "INSERT INTO t (a) VALUES ($$x;y$$)",
      "INSERT INTO t (a) VALUES ($tag$x;$$y$tag$) RETURNING id", "SELECT E'a\\';b'",
      %(SELECT 'a;b', "c;d" -- e;f\n), "DELETE FROM t /* ; */"
    ].each { |sql| assert SCOPE.single_data_statement?(sql), sql }
  end

  def test_several_statements_ddl_and_utility_commands_are_not
    [
      "SELECT 1; SELECT 2", "SELECT '\\'; DROP TABLE t; SELECT 'x'", "SELECT date'2020-01-01'; SELECT 2",
      "CREATE TABLE t (a int)", "VACUUM", "CREATE INDEX CONCURRENTLY i ON t (a)", "BEGIN", "SET search_path TO x"
    ].each { |sql| refute SCOPE.single_data_statement?(sql), sql }
  end

  def test_session_state_at_the_start_or_after_a_semicolon
    [
      "SET search_path TO x", "  /* tag */ -- note\nset statement_timeout = 5", "RESET ALL", "DISCARD ALL", "LISTEN c",
      "CREATE TEMP TABLE t (a int)", "SELECT 1; SET x.y = 1", "SELECT 1;\n/* c */ create temporary table t (a int)",
      "SELECT pg_advisory_lock(1)", "select set_config('x.y', '1', false)", "/* a /* nested */ comment */ SET x.y = 1"
    ].each { |sql| assert SCOPE.session_state?(sql), sql }
  end

  def test_statements_that_leave_the_session_as_it_was
    [
      "SELECT 1", "SET LOCAL x.y = 1", "SET TRANSACTION ISOLATION LEVEL SERIALIZABLE", "UPDATE t SET a = 1",
      %(INSERT INTO "posts" ("title") VALUES ('reset') RETURNING "id"), "SELECT 1; SET LOCAL x.y = 1",
      "SELECT pg_advisory_xact_lock(1)"
    ].each { |sql| refute SCOPE.session_state?(sql), sql }
  end

  # What the text test missed before: a DO block, temporary objects
  # made other than by CREATE TEMP at a statement's start, session functions called quoted or
  # with a comment before the parenthesis. Each leaked through the shared pool
  # (active_record_adapter_test's test_session_changes_do_not_leak_into_another_fibers_statements).
  def test_session_state_the_text_test_used_to_miss
    [
      "DO $$BEGIN SET search_path TO x; END$$", "do $$ begin perform 1; end $$",
      "SELECT 1 AS a INTO TEMP t", "select * into temporary table t from u", "CREATE TABLE pg_temp.t (a int)",
      "CREATE VIEW PG_TEMP.v AS SELECT 1", "EXPLAIN ANALYZE CREATE TEMP TABLE t AS SELECT 1",
      %(SELECT "set_config"('x.y', '1', false)), "SELECT pg_catalog.set_config /* c */ ('x.y', '1', false)",
      "WITH s AS (SELECT pg_try_advisory_lock_shared(1)) SELECT * FROM s", "sElEcT PG_ADVISORY_LOCK(1)", "Set Role app"
    ].each { |sql| assert SCOPE.session_state?(sql), sql }
    [
      "INSERT INTO temperature (c) VALUES (1)", %(INSERT INTO "temp" ("a") VALUES (1)), "CREATE TABLE templates (a int)",
      "SELECT * FROM pg_temp_3.t", "SELECT 'x' AS template", "UPDATE docs SET body = 'do it'"
    ].each { |sql| refute SCOPE.session_state?(sql), sql }
  end

  # COPY's data follows the statement's answer on the same connection (active_record_adapter_test's
  # test_copy_keeps_its_connection_for_the_data_and_one_left_open_costs_only_that_connection).
  def test_copy_keeps_the_session
    ["COPY t FROM STDIN", "/* tag */ copy t (a, b) to stdout", "SELECT 1; COPY (SELECT 1) TO STDOUT"]
      .each { |sql| assert SCOPE.session_state?(sql), sql }
    ["SELECT copy FROM t", "INSERT INTO copy_jobs (a) VALUES (1)", "SELECT * FROM copyright"]
      .each { |sql| refute SCOPE.session_state?(sql), sql }
  end

  # Block comments are read as PostgreSQL nests them. The comment's end used to be any later
  # `*/`: a comment before a statement and one inside it made one, and what followed the second
  # counted as the statement's first word (an UPDATE with a comment before its SET leased a
  # connection, and was given back with DISCARD ALL, as a session change).
  def test_comments_end_where_postgresql_ends_them
    ["/* app */ UPDATE t /* note */ SET a = 1", "/*application='x'*/ SELECT 1 /* do */ FROM t",
     "-- a\n/* b */ DELETE FROM t /* c */ /* d */ RETURNING 1"]
      .each { |sql| refute SCOPE.session_state?(sql), sql }
    ["/* a /* nested */ comment */ SET x.y = 1", "/* a /* b /* c */ */ */ LISTEN c", "/**/reset all",
     "/*/ x */ DISCARD ALL"]
      .each { |sql| assert SCOPE.session_state?(sql), sql }
    assert_equal :start, SCOPE.transaction_role("/* a /* b */ c */ -- d\n BEGIN")
    assert_nil SCOPE.transaction_role("/* a */ SELECT 1 /* b */ BEGIN")
  end

  # Many comments before a statement took 2^n tries on Ruby 3.1 (no backtracking memo there):
  # 22 of them, 0.5 s; this is every statement's first test in Pool#query.
  def test_many_leading_comments_take_no_time
    sql = "#{'/* tag */ ' * 26}SELECT 1"
    started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    [SCOPE.transaction_role(sql), SCOPE.session_state?(sql), SCOPE.single_data_statement?(sql)]
      .then { |answers| assert_equal [nil, false, true], answers }
    assert_operator Process.clock_gettime(Process::CLOCK_MONOTONIC) - started, :<, 0.05
  end

  # A transaction's start, and settings of the transaction under way (on a shared connection,
  # the pipeline segment's).
  def test_transaction_statements
    ["BEGIN", "start transaction", "SET LOCAL x.y = 1", "/* t */ set local statement_timeout = 5",
     "SET TRANSACTION ISOLATION LEVEL SERIALIZABLE", "SET CONSTRAINTS ALL DEFERRED"]
      .each { |sql| assert SCOPE.transaction_statement?(sql), sql }
    ["SET x.y = 1", "SELECT set_config('x.y', '1', true)", "UPDATE t SET a = 1", "SET local_x.y = 1", "COMMIT"]
      .each { |sql| refute SCOPE.transaction_statement?(sql), sql }
  end

  # What Pool#query asks of every statement: it refuses a transaction's start (and a change of
  # the session outside Pool#with), and sends a setting or the end of the transaction under way
  # in a pipeline segment of its own.
  def test_transaction_role
    ["BEGIN", "  start transaction isolation level serializable", "-- tag\n/* app */ begin;"]
      .each { |sql| assert_equal :start, SCOPE.transaction_role(sql), sql }
    ["SET LOCAL x.y = 1", "/* t */ set local statement_timeout = 5", "SET TRANSACTION READ ONLY",
     "SET CONSTRAINTS ALL DEFERRED", "SELECT set_config('x.y', '1', true)", "select SET_CONFIG($1, $2, TRUE)",
     "SELECT pg_catalog.set_config ( 'x.y', 'it''s, (1)' , true ), \"set_config\"(name, $1, true) FROM t"]
      .each { |sql| assert_equal :setting, SCOPE.transaction_role(sql), sql }
    # set_config(..., false) is a session SET; an `is_local` the text does not show counts as one.
    ["select SET_CONFIG($1, $2, $3)", "SELECT 1 FROM t WHERE pg_catalog.set_config('x', 'y', false) IS NOT NULL",
     "SELECT set_config('a', '1', true), set_config('b', '2', false)", "SELECT set_config('a', lower('X'), true)",
     "SELECT set_config('a', '1' /* c */, true)", "SELECT set_config('a', '1', true OR false)"]
      .each { |sql| assert_equal :session, SCOPE.transaction_role(sql), sql }
    ["COMMIT", "end", "/* app */ ROLLBACK", "abort;", "-- t\nrollback to savepoint a", "COMMIT PREPARED 'x'",
     "PREPARE TRANSACTION 'x'"]
      .each { |sql| assert_equal :end, SCOPE.transaction_role(sql), sql }
    ["SET x.y = 1", "SET local_x.y = 1", "PREPARE q AS SELECT 1", "LISTEN x", "COPY t FROM STDIN",
     "SELECT pg_advisory_lock(1)", "CREATE TEMP TABLE t (a int)", "/* app */ DEALLOCATE ALL"]
      .each { |sql| assert_equal :session, SCOPE.transaction_role(sql), sql }
    ["SELECT 1", "UPDATE t SET local = 1", "SELECT 'begin'", "SELECT 'commit'",
     "INSERT INTO t (a) VALUES ('set local')", "UPDATE t SET ended = true",
     "SELECT * FROM commits", "WITH e AS (SELECT 1) SELECT * FROM e", "SELECT pg_advisory_xact_lock(1)"]
      .each { |sql| assert_nil SCOPE.transaction_role(sql), sql }
  end

  # A frozen text's role is kept (Pool#query asks it of every statement); asked again, each
  # text still gets its own, and an unfrozen text, which may have changed since, is read again.
  def test_transaction_role_asked_again
    { "BEGIN" => :start, "SET LOCAL x.y = 1" => :setting, "COMMIT" => :end, "SELECT 1" => nil }.each do |text, role|
      frozen = -"/* again */ #{text}"
      2.times { role ? assert_equal(role, SCOPE.transaction_role(frozen), text) : assert_nil(SCOPE.transaction_role(frozen)) }
    end
    text = +"SELECT 1"
    assert_nil SCOPE.transaction_role(text)
    text.replace("BEGIN")
    assert_equal :start, SCOPE.transaction_role(text)
  end

  # Texts frozen afresh for every statement (interpolated, then frozen) cannot make the kept
  # roles grow without bound, nor keep a long text alive.
  def test_kept_roles_are_bounded
    kept = SCOPE.const_get(:ROLES)
    (SCOPE::ROLES_KEPT * 2 + 1).times { |i| assert_nil SCOPE.transaction_role(-"SELECT #{i}") }
    assert_operator kept.size, :<=, SCOPE::ROLES_KEPT
    long = -"SELECT 1 -- #{'x' * SCOPE::ROLE_TEXT_MAX}"
    assert_nil SCOPE.transaction_role(long)
    refute kept.key?(long)
  end
end
