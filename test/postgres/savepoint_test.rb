# frozen_string_literal: true

require_relative "../test_helper"
require "weft/postgres"

# Pool#transaction(requires_new: true) inside a transaction runs in a savepoint: its failure
# undoes its own rows only and the enclosing transaction goes on; the enclosing transaction's
# failure undoes everything. Checked by the rows left in a table, and by the connection being
# idle (no transaction, no savepoint) when the pool hands it out again.
class PostgresSavepointTest < Minitest::Test
  include Weft::Test::PostgresPools

  # A fresh table for this test; returns a lambda that lists its values in order.
  def table(db, name)
    db.query("create table if not exists #{name} (v int)")
    db.query("truncate #{name}")
    -> { db.query("select v from #{name} order by v").column_values(0).map(&:to_i) }
  end

  def assert_connection_idle(db)
    db.with { |conn| assert_equal PG::PQTRANS_IDLE, conn.transaction_status }
    stats = db.statistics
    assert_equal 0, stats[:pinned]
    assert_equal 0, stats[:discarded]
  end

  def test_an_inner_failure_rolls_back_only_the_inner_rows
    db = pool(limit: 2)
    reactor do
      rows = table(db, "sp_inner")
      db.transaction do |conn|
        conn.exec("insert into sp_inner values (1)")
        error = assert_raises(RuntimeError) do
          db.transaction(requires_new: true) do |inner|
            assert_same conn, inner
            inner.exec("insert into sp_inner values (2)")
            raise "inner failure"
          end
        end
        assert_equal "inner failure", error.message
        assert_equal PG::PQTRANS_INTRANS, conn.transaction_status # the outer one goes on
        conn.exec("insert into sp_inner values (3)")
        db.transaction(requires_new: true) { db.query("insert into sp_inner values (4)") }
      end
      assert_equal [1, 3, 4], rows.call
      assert_connection_idle(db)
    end
  end

  def test_an_outer_failure_rolls_back_everything
    db = pool(limit: 2)
    reactor do
      rows = table(db, "sp_outer")
      assert_raises(RuntimeError) do
        db.transaction do |conn|
          conn.exec("insert into sp_outer values (1)")
          db.transaction(requires_new: true) { |inner| inner.exec("insert into sp_outer values (2)") }
          raise "outer failure"
        end
      end
      assert_equal [], rows.call
      assert_connection_idle(db)
    end
  end

  def test_deep_nesting
    db = pool(limit: 2)
    reactor do
      rows = table(db, "sp_deep")
      # Levels 1 to 6, each inserting its number; level 4 fails and level 3 rescues that: levels
      # 4 to 6 are undone, 1 to 3 commit.
      nest = lambda do |level|
        db.transaction(requires_new: true) do |conn|
          conn.exec_params("insert into sp_deep values ($1)", [level])
          raise "level #{level}" if level == 6
          if level == 3
            error = assert_raises(RuntimeError) { nest.call(level + 1) }
            assert_equal "level 6", error.message
            conn.exec_params("insert into sp_deep values ($1)", [level * 10])
          elsif level < 6
            nest.call(level + 1)
          end
        end
      end
      db.transaction { nest.call(1) }
      assert_equal [1, 2, 3, 30], rows.call

      # The savepoints are named by depth: a second round reuses the names.
      db.transaction { nest.call(1) }
      assert_equal [1, 1, 2, 2, 3, 3, 30, 30], rows.call
      assert_connection_idle(db)
    end
  end

  def test_a_statement_error_rescued_inside_a_savepoint_rolls_it_back_and_the_outer_commits
    db = pool(limit: 2)
    reactor do
      rows = table(db, "sp_rescued")
      db.transaction do |conn|
        conn.exec("insert into sp_rescued values (1)")
        assert_raises(Weft::Postgres::TransactionRolledBack) do
          db.transaction(requires_new: true) do |inner|
            inner.exec("insert into sp_rescued values (2)")
            assert_raises(PG::DivisionByZero) { inner.exec("select 1/0") }
          end
        end
        # A statement error that leaves the savepoint is undone the same way.
        assert_raises(PG::DuplicateTable) do
          db.transaction(requires_new: true) do |inner|
            inner.exec("insert into sp_rescued values (3)")
            inner.exec("create temporary table sp_twice (v int)")
            inner.exec("create temporary table sp_twice (v int)")
          end
        end
        conn.exec("insert into sp_rescued values (4)")
      end
      assert_equal [1, 4], rows.call
      assert_connection_idle(db)
    end
  end

  def test_leaving_a_savepoint_early_rolls_it_back
    db = pool(limit: 2)
    reactor do
      rows = table(db, "sp_early")
      db.transaction do |conn|
        conn.exec("insert into sp_early values (1)")
        [2, 3].each do |v|
          db.transaction(requires_new: true) do |inner|
            inner.exec_params("insert into sp_early values ($1)", [v])
            break if v == 2 # leaves this savepoint without finishing it: undone; 3 goes on
          end
        end
        caught = catch(:out) do
          db.transaction(requires_new: true) do |inner|
            inner.exec("insert into sp_early values (4)")
            throw :out, :thrown
          end
        end
        assert_equal :thrown, caught
      end
      assert_equal [1, 3], rows.call
      assert_connection_idle(db)
    end
  end

  # A savepoint whose statement is interrupted (here by a timeout) has the statement cancelled
  # on the server and is rolled back to; the enclosing transaction goes on and commits.
  def test_an_interrupted_savepoint_is_cancelled_and_the_outer_goes_on
    db = pool(limit: 2)
    reactor do
      rows = table(db, "sp_timeout")
      db.transaction do |conn|
        conn.exec("insert into sp_timeout values (1)")
        assert_raises(Weft::TimeoutError) do
          Weft.timeout(0.2) do
            db.transaction(requires_new: true) do |inner|
              inner.exec("insert into sp_timeout values (2)")
              inner.exec("select pg_sleep(10)")
            end
          end
        end
        assert_equal PG::PQTRANS_INTRANS, conn.transaction_status
        conn.exec("insert into sp_timeout values (3)")
      end
      assert_equal [1, 3], rows.call
      assert_equal "0", db.query("select count(*) from pg_stat_activity where state = 'active' and " \
                                 "query = 'select pg_sleep(10)'").getvalue(0, 0)
      assert_connection_idle(db)
    end
  end

  def test_without_requires_new_a_nested_transaction_joins_the_outer_one
    db = pool(limit: 2)
    reactor do
      rows = table(db, "sp_join")
      db.transaction do |conn|
        conn.exec("insert into sp_join values (1)")
        assert_raises(RuntimeError) do
          db.transaction do |inner|
            inner.exec("insert into sp_join values (2)")
            raise "not undone: no savepoint"
          end
        end
      end
      assert_equal [1, 2], rows.call
      # A failed statement in a joined transaction fails the whole transaction.
      assert_raises(Weft::Postgres::TransactionRolledBack) do
        db.transaction do |conn|
          conn.exec("insert into sp_join values (3)")
          assert_raises(PG::DivisionByZero) { db.transaction { |inner| inner.exec("select 1/0") } }
        end
      end
      assert_equal [1, 2], rows.call
      # Outside a transaction requires_new just starts one.
      assert_raises(RuntimeError) do
        db.transaction(requires_new: true) do |conn|
          conn.exec("insert into sp_join values (5)")
          raise "rolled back"
        end
      end
      assert_equal [1, 2], rows.call
      assert_connection_idle(db)
    end
  end

  # 100 fibers on 4 connections, each an outer transaction with a savepoint; some savepoints
  # fail, some outer transactions fail. Each fiber's rows are exactly what its own outcome says:
  # no statement ran in another fiber's transaction.
  def test_many_fibers_each_commit_or_roll_back_exactly_their_own_work
    db = pool(limit: 4)
    reactor do
      rows = table(db, "sp_many")
      tasks = Array.new(100) do |fiber|
        Weft.spawn do
          db.transaction do |conn|
            conn.exec_params("insert into sp_many values ($1)", [fiber * 10])
            begin
              db.transaction(requires_new: true) do |inner|
                inner.exec_params("insert into sp_many values ($1)", [(fiber * 10) + 1])
                db.query("select pg_sleep(0.001)")
                raise "inner" if (fiber % 3).zero?
              end
            rescue RuntimeError
              nil
            end
            raise "outer" if (fiber % 5).zero?
          end
          :committed
        rescue RuntimeError
          :rolled_back
        end
      end
      outcomes = Weft.gather(tasks)
      expected = outcomes.each_with_index.flat_map do |outcome, fiber|
        next [] if outcome == :rolled_back
        (fiber % 3).zero? ? [fiber * 10] : [fiber * 10, (fiber * 10) + 1]
      end
      assert_equal (0...100).map { |fiber| (fiber % 5).zero? ? :rolled_back : :committed }, outcomes
      assert_equal expected.sort, rows.call
      assert_connection_idle(db)
      assert_operator db.statistics[:connects], :<=, 4
    end
  end
end
