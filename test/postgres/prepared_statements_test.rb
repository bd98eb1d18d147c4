# frozen_string_literal: true

require_relative "../test_helper"
require "weft/postgres"

# Pool#query's named prepared statements (Weft::Postgres::PreparedStatements), against the
# shared throwaway cluster: a text seen again is prepared on its connection, one seen once never
# is; the bound evicts and deallocates; a user's DEALLOCATE ALL, DISCARD ALL and a schema change
# that alters a statement's result are invisible to callers; failures in a segment with a Parse
# leave the table right; typed parameters are never bound to a statement prepared untyped; the
# option off prepares nothing. On one connection (limit: 1) so that a pinned look at
# pg_prepared_statements sees the statements #query prepared.
class PostgresPreparedStatementsTest < Minitest::Test
  include Weft::Test::PostgresPools

  REPEATED = "select 40 + 2 as answer"

  # Named statements of the pool's connection, name => text.
  def server_statements(db)
    db.with { |conn| conn.exec("select name, statement from pg_prepared_statements").values.to_h }
  end

  def ours(statements)
    statements.select { |name, _| name.start_with?(Weft::Postgres::PreparedStatements::PREFIX) }
  end

  # `count` fibers each running the block `times` times at once, so that the one connection is
  # shared (pipelined): returns what the blocks returned.
  def pipelined(db, count: 50, times: 4, &block)
    tasks = Array.new(count) { |fiber| Weft.spawn { Array.new(times) { |i| block.call(fiber, i) } } }
    values = Weft.gather(tasks)
    assert_operator db.statistics[:pipelined], :>, 0, "nothing was pipelined"
    values
  end

  def test_repeated_texts_are_prepared_and_unique_ones_never_pipelined
    db = pool(limit: 1)
    reactor do
      values = pipelined(db) do |fiber, i|
        db.query(i.even? ? REPEATED : "select #{(fiber * 10) + i} as unique_text").getvalue(0, 0)
      end
      values.each_with_index do |row, fiber|
        assert_equal ["42", ((fiber * 10) + 1).to_s, "42", ((fiber * 10) + 3).to_s], row
      end
      named = ours(server_statements(db))
      assert_equal [REPEATED], named.values, "the repeated text alone is prepared, once"
      assert_equal 1, db.statistics[:prepared]
    end
  end

  def test_repeated_texts_are_prepared_on_a_connection_of_their_own_and_unpipelined
    [pool(limit: 1), pool(limit: 1, pipelining: false)].each do |db|
      reactor do
        assert_equal "unique 1", db.query("select 'unique 1'").getvalue(0, 0)
        2.times { assert_equal "7", db.query("select $1::int + 1", "6").getvalue(0, 0) }
        assert_equal({ "select $1::int + 1" => 1 }, ours(server_statements(db)).values.tally)
        assert_equal "8", db.query("select $1::int + 1", "7").getvalue(0, 0) # bound, not parsed again
        assert_equal 1, ours(server_statements(db)).size
        assert_equal 0, db.statistics[:pipelined]
      end
    end
  end

  def test_the_option_off_sends_nothing_named
    db = pool(limit: 1, prepared_statements: false)
    reactor do
      pipelined(db) { db.query(REPEATED) }
      5.times { db.query(REPEATED) }
      assert_empty ours(server_statements(db))
      assert_nil db.prepared_limit
    end
    assert_equal 256, pool(prepared_statements: true).prepared_limit
    assert_raises(ArgumentError) { pool(prepared_statements: -1) }
  end

  def test_the_bound_evicts_the_least_recently_used_and_deallocates_it
    texts = Array.new(5) { |i| "select #{i} as evicted" }
    [true, false].each do |pipelining|
      db = pool(limit: 1, prepared_statements: 2, pipelining: pipelining)
      reactor do
        texts.each do |text|
          3.times { assert_equal text[/\d/], db.query(text).getvalue(0, 0) }
          named = ours(server_statements(db))
          assert_operator named.size, :<=, 2, "more named statements than the bound: #{named}"
          assert_includes named.values, text
        end
        # The last two stay; the most recently used of them survives the next eviction.
        db.query(texts[3])
        2.times { db.query("select 'newcomer'") }
        assert_equal ["select 'newcomer'", texts[3]].sort, ours(server_statements(db)).values.sort
        if pipelining
          values = pipelined(db) { |fiber, i| db.query(texts[(fiber + i) % 5]).getvalue(0, 0) }
          assert_equal Array.new(50) { |fiber| Array.new(4) { |i| ((fiber + i) % 5).to_s } }, values
          assert_operator ours(server_statements(db)).size, :<=, 2
        end
        assert_operator db.statistics[:prepared], :<=, 2
      end
    end
  end

  def test_deallocate_all_and_discard_all_on_a_pinned_connection_are_invisible
    db = pool(limit: 1)
    reactor do
      2.times { db.query(REPEATED) }
      refute_empty ours(server_statements(db))
      db.with { |conn| conn.exec("DEALLOCATE ALL") }
      assert_equal "42", db.query(REPEATED).getvalue(0, 0) # named: 26000, then unnamed
      assert_equal "42", db.query(REPEATED).getvalue(0, 0) # prepared again
      assert_equal [REPEATED], ours(server_statements(db)).values

      db.with { 3.times { assert_equal "DEALLOCATE ALL", db.query("DEALLOCATE ALL").cmd_status } } # never named itself
      assert_empty ours(server_statements(db))
      2.times { assert_equal "42", db.query(REPEATED).getvalue(0, 0) }
      assert_equal [REPEATED], ours(server_statements(db)).values

      db.with { |conn| conn.exec("DISCARD ALL") }
      values = pipelined(db) { db.query(REPEATED).getvalue(0, 0) }
      assert_equal [%w[42 42 42 42]] * 50, values
      assert_equal [REPEATED], ours(server_statements(db)).values

      lease = db.lease
      lease.release(reset_session: true) # DISCARD ALL, and the pool forgets its statements
      assert_equal 0, db.statistics[:prepared]
      2.times { assert_equal "42", db.query(REPEATED).getvalue(0, 0) }
      assert_equal [REPEATED], ours(server_statements(db)).values
    end
  end

  def test_a_schema_change_that_alters_a_result_is_invisible
    db = pool(limit: 1)
    reactor do
      db.query("drop table if exists prepared_alter")
      db.query("create table prepared_alter (a int)")
      db.query("insert into prepared_alter values (1)")
      sql = "select * from prepared_alter"
      2.times { assert_equal [{ "a" => "1" }], db.query(sql).to_a }
      refute_empty ours(server_statements(db))
      db.query("alter table prepared_alter add column b text default 'x'")
      assert_equal [{ "a" => "1", "b" => "x" }], db.query(sql).to_a # plain: 0A000, then unnamed
      db.query("alter table prepared_alter add column c int default 3")
      values = pipelined(db) { db.query(sql).to_a } # pipelined: 0A000, then unnamed
      assert_equal [[[{ "a" => "1", "b" => "x", "c" => "3" }]] * 4] * 50, values
      assert_equal [sql], ours(server_statements(db)).values, "the stale statement was not deallocated"
    ensure
      db.query("drop table if exists prepared_alter")
    end
  end

  # Eight texts over a bound of four, every fourth statement failing: Parses skipped (an earlier
  # statement of their segment failed), Parses that succeeded in segments rolled back after
  # them, DEALLOCATEs skipped and sent again (~30, ~100 and ~30 of each in a run).
  def test_failures_in_segments_with_a_parse_leave_the_table_right
    db = pool(limit: 1, prepared_statements: 4)
    texts = Array.new(8) { |i| "select #{i} + $1::int as n" }
    reactor do
      outcomes = pipelined(db, count: 60, times: 6) do |fiber, i|
        if (fiber + i) % 4 == 0
          db.query("select 1 / $1::int", "0")
          :no_error
        else
          db.query(texts[(fiber + i) % 8], "1").getvalue(0, 0)
        end
      rescue PG::DivisionByZero
        :division_by_zero
      end
      outcomes.each_with_index do |row, fiber|
        row.each_with_index do |outcome, i|
          expected = (fiber + i) % 4 == 0 ? :division_by_zero : (((fiber + i) % 8) + 1).to_s
          assert_equal expected, outcome, "fiber #{fiber}, statement #{i}"
        end
      end
      named = ours(server_statements(db))
      assert_equal named.size, named.values.uniq.size, "a text prepared twice (the table lost one): #{named}"
      assert_equal db.statistics[:prepared], named.size, "the table and the server disagree"
      assert_includes 1..4, named.size
      # Every statement the table holds is usable: none falls back (a 26000 would prepare it
      # again, under a new name).
      named.each_value { |text| db.query(text, "1") }
      assert_equal named, ours(server_statements(db))
    end
  end

  def test_a_text_that_fails_to_parse_keeps_its_error_and_is_not_prepared
    db = pool(limit: 1)
    reactor do
      pipelined(db, count: 20, times: 3) do
        assert_raises(PG::UndefinedTable) { db.query("select * from prepared_no_such_table") }
        assert_equal "42", db.query(REPEATED).getvalue(0, 0)
      end
      3.times { assert_raises(PG::UndefinedTable) { db.query("select * from prepared_no_such_table") } }
      assert_equal [REPEATED], ours(server_statements(db)).values
    end
  end

  def test_typed_parameters_are_never_bound_to_a_statement_prepared_untyped
    db = pool(limit: 1)
    sql = "select $1 as v"
    reactor do
      2.times { assert_equal 25, db.query(sql, "5").ftype(0) } # text, inferred
      assert_equal [sql], ours(server_statements(db)).values
      typed = db.query(sql, { value: "5", type: 23, format: 0 })
      assert_equal [23, "5"], [typed.ftype(0), typed.getvalue(0, 0)]
      db.with do |conn|
        conn.type_map_for_queries = PG::BasicTypeMapForQueries.new(conn)
        result = db.query(sql, true) # a boolean to the type map
        assert_equal [16, "t"], [result.ftype(0), result.getvalue(0, 0)]
      ensure
        conn.type_map_for_queries = PG::TypeMapAllStrings.new
      end
      assert_equal 25, db.query(sql, "5").ftype(0)
      assert_equal [sql], ours(server_statements(db)).values
      # A type map that encodes as untyped text (Sequel's) keeps the statement named.
      untyped = PG::TypeMapByClass.new
      untyped[Integer] = PG::TextEncoder::Integer.new
      db.with do |conn|
        conn.type_map_for_queries = untyped
        3.times do |i|
          result = db.query("select $1 as w", i)
          assert_equal [25, i.to_s], [result.ftype(0), result.getvalue(0, 0)]
        end
      ensure
        conn.type_map_for_queries = PG::TypeMapAllStrings.new
      end
      assert_equal ["select $1 as v", "select $1 as w"], ours(server_statements(db)).values.sort
    end
  end

  def test_a_connection_replaced_after_its_backend_died_starts_with_none
    db = pool(limit: 1)
    reactor do
      2.times { db.query(REPEATED) }
      pid = db.query("select pg_backend_pid()").getvalue(0, 0)
      assert_equal 1, db.statistics[:prepared]
      PG.connect(postgres.conninfo) { |admin| admin.exec_params("select pg_terminate_backend($1)", [pid]) }
      sleep 0.05 # past JUST_USED: the pool looks at the idle connection, finds it dead, opens another
      assert_equal "42", db.query(REPEATED).getvalue(0, 0) # seen once on the new connection
      refute_equal pid, db.query("select pg_backend_pid()").getvalue(0, 0)
      assert_equal 0, db.statistics[:prepared]
      db.query(REPEATED)
      assert_equal [REPEATED], ours(server_statements(db)).values
      assert_equal 1, db.statistics[:prepared]
    end
  end

  # Behind a proxy that multiplexes sessions one connection's name must never find another's
  # statement: every table names its own.
  def test_no_two_connections_name_their_statements_alike
    names = Array.new(2) do
      table = Weft::Postgres::PreparedStatements.new(4)
      assert_nil table.lookup(REPEATED, [], nil, nil)
      assert_equal :prepare, table.lookup(REPEATED, [], nil, nil)
      table.prepare(REPEATED, nil).name
    end
    refute_equal names.first, names.last
    names.each do |name|
      assert_match(/\A#{Weft::Postgres::PreparedStatements::PREFIX}\h{12}_1\z/, name)
    end
  end

  # Inside a transaction block too (test/postgres/held_statements_test.rb has the rest).
  def test_statements_in_a_transaction_block_are_named
    db = pool(limit: 1)
    reactor do
      db.transaction do
        3.times { assert_equal "42", db.query(REPEATED).getvalue(0, 0) }
      end
      assert_equal [REPEATED], ours(server_statements(db)).values
      2.times { db.query(REPEATED) }
      assert_equal [REPEATED], ours(server_statements(db)).values
    end
  end
end
