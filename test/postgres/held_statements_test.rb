# frozen_string_literal: true

require_relative "../test_helper"
require "weft/postgres"

# Named prepared statements on held connections (Pool#with, Pool#transaction, Pool#lease),
# inside transaction blocks (issue #12): a text with parameters is prepared the second time it
# runs there, as on the shared path, and what only a held connection has keeps the table true:
# rollbacks (of transactions and savepoints), a Parse that fails inside a transaction (its error
# is the caller's, nothing counted), statements after a failure, the holder's own DEALLOCATE ALL
# / DISCARD ALL and PREPAREd names, COPY and LISTEN, an interrupted Parse, eviction inside a
# transaction, and texts whose result follows a table's columns. On one connection (limit: 1)
# so that pg_prepared_statements, read on the held connection itself, is the pool's.
class PostgresHeldStatementsTest < Minitest::Test
  include Weft::Test::PostgresPools

  PREFIX = Weft::Postgres::PreparedStatements::PREFIX
  INSERT = "insert into held_rows (n) values ($1)"
  TOTAL = "select sum(n) as total from held_rows where n >= $1"

  def setup
    super
    @admin = PG.connect(postgres.conninfo)
    # A failed test may leave a lease's transaction open on the table: fail, do not hang.
    @admin.exec("set client_min_messages to warning; set lock_timeout to '5s'")
    @admin.exec("drop table if exists held_rows; create table held_rows (n int)")
  end

  def teardown
    super # closes the pools
    @admin.exec("drop table if exists held_rows")
  ensure
    @admin.close
  end

  # The pool's named statements on the connection `conn` (the held one): name => text.
  def ours(conn)
    conn.exec("select name, statement from pg_prepared_statements").values.to_h
        .select { |name, _| name.start_with?(PREFIX) }
  end

  def test_statements_in_a_transaction_are_prepared_on_second_sight
    db = pool(limit: 1)
    reactor do
      db.transaction do |conn|
        3.times { |i| db.query(INSERT, i) }
        assert_equal "3", db.query(TOTAL, 0).getvalue(0, 0)
        assert_equal [INSERT], ours(conn).values, "the INSERT, seen again, is named; TOTAL was seen once"
        assert_equal "3", db.query(TOTAL, 0).getvalue(0, 0)
        assert_equal [INSERT, TOTAL].sort, ours(conn).values.sort
      end
      assert_equal 2, db.statistics[:prepared]
      # The next transaction binds them: nothing is prepared again.
      db.transaction do |conn|
        db.query(INSERT, 10)
        assert_equal "13", db.query(TOTAL, 0).getvalue(0, 0)
        assert_equal 2, ours(conn).size
      end
    end
  end

  def test_a_lease_names_its_statements_in_and_out_of_transactions
    db = pool(limit: 1)
    reactor do
      lease = db.lease
      lease.async_exec("BEGIN")
      3.times { |i| lease.exec_params(INSERT, [i]) }
      assert_equal [INSERT], ours(lease.raw).values
      lease.async_exec("COMMIT")
      2.times { assert_equal "3", lease.exec_params(TOTAL, [0]).getvalue(0, 0) } # outside a transaction
      assert_equal [INSERT, TOTAL].sort, ours(lease.raw).values.sort
      lease.release
      assert_equal 2, db.statistics[:prepared]
      lease = db.lease
      lease.release(reset_session: true) # DISCARD ALL: the table empties with the session
      assert_equal 0, db.statistics[:prepared]
    end
  end

  def test_the_option_off_names_nothing_on_held_connections
    db = pool(limit: 1, prepared_statements: false)
    reactor do
      db.transaction do |conn|
        3.times { |i| db.query(INSERT, i) }
        assert_empty ours(conn)
      end
      lease = db.lease
      lease.async_exec("BEGIN")
      3.times { |i| lease.exec_params(INSERT, [i]) }
      assert_empty ours(lease.raw)
      lease.async_exec("COMMIT")
      lease.release
    end
  end

  # PostgreSQL keeps a statement prepared in a transaction or a savepoint that is rolled back
  # (and does not undo a DEALLOCATE): the table keeps them, and they work afterwards.
  def test_statements_prepared_in_what_rolls_back_stay_prepared
    db = pool(limit: 1)
    reactor do
      assert_raises(RuntimeError) do
        db.transaction do
          2.times { |i| db.query(INSERT, i) }
          raise "roll back"
        end
      end
      db.transaction do |conn|
        assert_equal [INSERT], ours(conn).values
        begin
          db.transaction(requires_new: true) do
            2.times { db.query(TOTAL, 0) }
            raise "roll back the savepoint"
          end
        rescue RuntimeError
          nil
        end
        assert_equal [INSERT, TOTAL].sort, ours(conn).values.sort
        db.query(INSERT, 5)
        assert_equal "5", db.query(TOTAL, 0).getvalue(0, 0)
      end
      assert_equal 2, db.statistics[:prepared]
    end
  end

  # A Parse that fails inside a transaction aborted it: the caller gets the Parse's own error
  # (not 25P02 from a statement sent again after it), and the table counts no statement; the
  # text is prepared once it works.
  def test_a_parse_that_fails_in_a_transaction_is_the_callers_error_and_counts_nothing
    db = pool(limit: 1)
    reactor do
      db.query(INSERT, 1) # seen once
      assert_raises(PG::UndefinedTable) do
        db.transaction do
          db.query("drop table held_rows")
          db.query(INSERT, 2) # the Parse fails: no such table
        end
      end
      assert_equal 0, db.statistics[:prepared]
      db.transaction do |conn|
        db.query(INSERT, 3) # prepared now (the drop was rolled back)
        assert_equal [INSERT], ours(conn).values
        assert_equal "4", db.query(TOTAL, 0).getvalue(0, 0)
      end
      assert_equal 1, db.statistics[:prepared]
    end
  end

  # After a statement failed, the transaction answers 25P02 to everything: nothing is prepared
  # then, and a statement already named keeps being believed (it exists; the rollback keeps it).
  def test_statements_after_a_failure_in_a_transaction_change_nothing
    db = pool(limit: 1)
    reactor do
      db.transaction { 2.times { |i| db.query(INSERT, i) } } # INSERT named; TOTAL not seen yet
      db.query(TOTAL, 0)
      assert_raises(PG::DivisionByZero) do
        db.transaction do
          db.query("select 1 / $1::int", 0)
        rescue PG::DivisionByZero
          assert_raises(PG::InFailedSqlTransaction) { db.query(TOTAL, 0) } # seen twice: not prepared now
          assert_raises(PG::InFailedSqlTransaction) { db.query(INSERT, 9) }
          raise
        end
      end
      assert_equal 1, db.statistics[:prepared]
      db.transaction do |conn|
        assert_equal "1", db.query(TOTAL, 0).getvalue(0, 0)
        assert_equal [INSERT, TOTAL].sort, ours(conn).values.sort
      end
    end
  end

  # The holder's DEALLOCATE ALL or DISCARD ALL sent through the pool (Pool#query inside #with,
  # Lease#async_exec) empties the table, so that the next transaction's statements are
  # prepared afresh instead of failing with 26000.
  def test_a_holders_deallocate_all_and_discard_all_empty_the_table
    db = pool(limit: 1)
    reactor do
      db.transaction { 2.times { |i| db.query(INSERT, i) } }
      db.with { db.query("DEALLOCATE ALL") }
      assert_equal 0, db.statistics[:prepared]
      db.transaction do |conn|
        2.times { |i| db.query(INSERT, i) }
        assert_equal [INSERT], ours(conn).values
      end
      lease = db.lease
      lease.async_exec("DISCARD ALL")
      assert_equal 0, db.statistics[:prepared]
      lease.async_exec("BEGIN")
      2.times { |i| lease.exec_params(INSERT, [i]) }
      name = ours(lease.raw).keys.first
      lease.async_exec("COMMIT")
      quoted = %(DEALLOCATE "#{name.upcase}") # quoted: a name of its own, not the pool's
      assert_raises(PG::InvalidSqlStatementName) { lease.async_exec(quoted) }
      assert_equal 1, db.statistics[:prepared]
      lease.async_exec("DEALLOCATE #{name.upcase}") # one of the pool's names (folded), by the holder
      assert_equal 0, db.statistics[:prepared]
      lease.async_exec("BEGIN")
      2.times { |i| lease.exec_params(INSERT, [i]) }
      assert_equal [INSERT], ours(lease.raw).values
      lease.async_exec("COMMIT")
      lease.release
    end
  end

  # What the holder runs on the PG::Connection itself is out of the pool's sight: a DEALLOCATE
  # ALL there fails the next named statement inside a transaction once (26000: the transaction
  # was aborted by it), and the table, emptied then, fails nothing after.
  def test_a_deallocate_all_out_of_sight_fails_one_transaction_only
    db = pool(limit: 1)
    reactor do
      db.transaction { 2.times { |i| db.query(INSERT, i) } }
      db.with { |conn| conn.exec("DEALLOCATE ALL") }
      assert_raises(PG::InvalidSqlStatementName) { db.transaction { db.query(INSERT, 3) } }
      assert_equal 0, db.statistics[:prepared]
      db.transaction { 2.times { |i| db.query(INSERT, i) } }
      assert_equal 1, db.statistics[:prepared]
      # Outside a transaction block the same is invisible (sent again unnamed).
      db.with do |conn|
        conn.exec("DEALLOCATE ALL")
        db.query(INSERT, 4)
      end
      assert_equal "6", db.query(TOTAL, 0).getvalue(0, 0)
    end
  end

  # The holder's own prepared statements, of any name, and the pool's live side by side; a
  # name of the pool's taken by the holder (read from pg_prepared_statements) costs the pool
  # that name, not the caller's statement.
  def test_a_holders_own_prepared_names_never_meet_the_pools
    db = pool(limit: 1)
    reactor do
      db.with do |conn|
        conn.prepare("a1", INSERT)               # ActiveRecord's kind of name, same text
        conn.exec("PREPARE s1 AS select 1")
        2.times { |i| db.query(INSERT, i) }
        ours = ours(conn)
        assert_equal [INSERT], ours.values
        taken = ours.keys.first.sub(/\d+\z/) { |serial| (serial.to_i + 1).to_s } # the pool's next name
        conn.prepare(taken, "select 2")
        2.times { db.query(TOTAL, 0) } # its Parse meets the taken name: sent unnamed
        assert_equal "1", db.query(TOTAL, 0).getvalue(0, 0) # prepared under another name
        assert_equal [INSERT, TOTAL, "select 2"].sort, ours(conn).values.sort
        conn.exec_prepared("a1", [7])
        conn.exec("DEALLOCATE a1; DEALLOCATE s1")
      end
      db.transaction do |conn|
        db.query(INSERT, 1)
        assert_equal "9", db.query(TOTAL, 0).getvalue(0, 0)
        assert_equal 3, ours(conn).size
      end
    end
  end

  # COPY and LISTEN change the session: never prepared, inside a transaction or out.
  def test_copy_and_listen_are_never_prepared
    db = pool(limit: 1)
    reactor do
      db.transaction do |conn|
        3.times do |i|
          db.query("copy held_rows (n) from stdin")
          conn.put_copy_data("#{i}\n")
          conn.put_copy_end
          conn.get_last_result
          db.query("listen held_channel")
          db.query(INSERT, i)
        end
        assert_equal [INSERT], ours(conn).values
        assert_equal "6", db.query(TOTAL, 0).getvalue(0, 0)
      end
      db.with { db.query("unlisten *") }
      assert_equal 1, db.statistics[:prepared]
    end
  end

  # A Parse interrupted while it waits (a lock held on the table) may or may not have made its
  # statement: the table drops it and deallocates the name later, outside a transaction; the
  # connection, given back mid-statement, is rolled back and used again.
  def test_an_interrupted_parse_leaves_the_table_true
    db = pool(limit: 1)
    reactor do
      db.query(INSERT, 1)
      @admin.exec("BEGIN; LOCK TABLE held_rows IN ACCESS EXCLUSIVE MODE")
      lease = db.lease
      lease.async_exec("BEGIN")
      assert_raises(Weft::DeadlineExceeded) do
        Weft.deadline(0.2) { lease.exec_params(INSERT, [2]) } # its Parse waits for the lock
      end
      lease.release
      @admin.exec("ROLLBACK")
      assert_equal 0, db.statistics[:prepared]
      db.query(INSERT, 3) # outside a transaction: the interrupted name is deallocated first
      db.transaction do |conn|
        db.query(INSERT, 4)
        assert_equal [INSERT], ours(conn).values
        assert_equal "8", db.query(TOTAL, 0).getvalue(0, 0)
      end
      assert_equal 1, db.statistics[:prepared]
    end
  ensure
    @admin.exec("ROLLBACK") if @admin.transaction_status != PG::PQTRANS_IDLE
  end

  # The bound holds inside a transaction: a statement evicted there is deallocated at once.
  def test_eviction_inside_a_transaction_deallocates
    db = pool(limit: 1, prepared_statements: 2)
    texts = Array.new(5) { |i| "select #{i} + $1::int as evicted" }
    reactor do
      db.transaction do |conn|
        texts.each { |text| 2.times { assert_equal "#{text[/\d/].to_i + 1}", db.query(text, 1).getvalue(0, 0) } }
        named = ours(conn)
        assert_equal 2, named.size
        assert_equal named.values.sort, texts.last(2).sort
      end
      assert_equal 2, db.statistics[:prepared]
    end
  end

  # A text whose result follows a table's columns (`select *`, `returning *`) is not named
  # inside a transaction block, where a schema change's 0A000 would abort the transaction; it
  # is named outside one, where it is sent again unnamed.
  def test_whole_row_results_go_unnamed_inside_transactions
    db = pool(limit: 1)
    star = "select * from held_rows where n = $1"
    reactor do
      db.query(INSERT, 1)
      db.transaction do |conn|
        3.times { assert_equal [{ "n" => "1" }], db.query(star, 1).to_a }
        3.times { db.query("select count(*) as c, /* a * b */ 2 * 3 as six from held_rows where n = $1", 1) }
        assert_equal ["select count(*) as c, /* a * b */ 2 * 3 as six from held_rows where n = $1"], ours(conn).values
      end
      2.times { db.query(star, 1) } # prepared outside
      @admin.exec("alter table held_rows add column m int default 7")
      db.transaction do
        assert_equal [{ "n" => "1", "m" => "7" }], db.query(star, 1).to_a # unnamed: no 0A000
      end
    end
    refute Weft::Postgres::PreparedStatements.whole_row?("select count(*) from t where a = '*'")
    assert Weft::Postgres::PreparedStatements.whole_row?('insert into t (a) values ($1) returning *')
    assert Weft::Postgres::PreparedStatements.whole_row?('select "t".* from t')
  end
end
