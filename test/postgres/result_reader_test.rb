# frozen_string_literal: true

require_relative "../test_helper"
require "weft/postgres"

# Weft::Postgres::ResultReader's contract, for the C reader (ext/weft_pg) and the Ruby
# one alike, on a real pipelined connection: what it appends for results, statement ends and
# sync points, where it stops, and what it counts as not succeeded.
class ResultReaderTest < Minitest::Test
  READERS = { "ruby" => Weft::Postgres::ResultReader }.tap do |readers|
    readers["native"] = Weft::Postgres::NativeResultReader if Weft::Postgres::ResultReader::READER != Weft::Postgres::ResultReader
  end.freeze

  def setup
    @conn = PG.connect(postgres.conninfo)
    @conn.setnonblocking(true)
    @conn.enter_pipeline_mode
  end

  def teardown
    @conn.close unless @conn.nil? || @conn.finished?
  end

  def test_the_c_reader_is_built_and_bound
    skip "WEFT_PG_READER=ruby" if ENV["WEFT_PG_READER"] == "ruby"
    assert_equal Weft::Postgres::NativeResultReader, Weft::Postgres::ResultReader::READER
  end

  READERS.each do |name, reader|
    define_method(:"test_#{name}_takes_results_ends_and_sync_points_in_order") do
      send_segment("select 1", "select 2, 3", "create temporary table t (i int)")
      results = take_until_synced(reader, 1)
      assert_equal [PG::Result, nil, PG::Result, nil, PG::Result, nil, true], results.map { |r| r.is_a?(PG::Result) ? PG::Result : r }
      assert_equal [["1"]], results[0].values
      assert_equal [%w[2 3]], results[2].values
      assert_equal PG::PGRES_COMMAND_OK, results[4].result_status
      assert_equal 0, @failed
    end

    define_method(:"test_#{name}_counts_a_failure_and_the_statements_skipped_after_it") do
      send_segment("select 1", "select 1/0", "select 3")
      send_segment("select 4")
      results = take_until_synced(reader, 2)
      statuses = results.map { |r| r.is_a?(PG::Result) ? r.result_status : r }
      assert_equal [PG::PGRES_TUPLES_OK, nil, PG::PGRES_FATAL_ERROR, nil, PG::PGRES_PIPELINE_ABORTED, nil, true,
                    PG::PGRES_TUPLES_OK, nil, true], statuses
      assert_equal 2, @failed
      assert_equal "22012", results[2].error_field(PG::PG_DIAG_SQLSTATE)
    end

    define_method(:"test_#{name}_stops_when_libpq_would_wait") do
      send_segment("select pg_sleep(0.3)")
      results = []
      assert_equal 0, reader.take(@conn, results, 1)
      assert_empty results, "nothing has come yet"
      assert_equal [PG::Result, nil, true], take_until_synced(reader, 1).map { |r| r.is_a?(PG::Result) ? PG::Result : r }
    end

    define_method(:"test_#{name}_stops_after_the_sync_points_it_is_told_of") do
      send_segment("select 1")
      send_segment("select 2")
      results = take_until_synced(reader, 1)
      assert_equal 3, results.size, "it read past the first sync point: #{results.inspect}"
      assert_equal [["2"]], take_until_synced(reader, 1).first.values
    end

    define_method(:"test_#{name}_takes_nothing_with_nothing_in_flight") do
      results = []
      assert_equal 0, reader.take(@conn, results, 1)
      # libpq answers "no more results" for ever when nothing is queued: the reader stops at
      # the second in a row (the first cannot be told from a statement's end).
      assert_operator results.size, :<=, 1
      assert results.all?(&:nil?), results.inspect
    end

    define_method(:"test_#{name}_raises_on_a_closed_connection") do
      @conn.close
      assert_raises(PG::ConnectionBad) { reader.take(@conn, [], 1) }
    end
  end

  def test_the_c_sender_sends_a_prepared_statement_without_parameters
    skip "the C reader is not bound" if Weft::Postgres::ResultReader::SENDER.nil?
    @conn.send_prepare("weft_test_one", "select 1 as one")
    assert_equal true, Weft::Postgres::NativeSender.send_prepared(@conn, "weft_test_one")
    assert_equal true, Weft::Postgres::NativeSender.send_prepared(@conn, "weft_test_one")
    @conn.__send__(Weft::Postgres::Pipeline::SEND_SYNC)
    @conn.flush
    results = take_until_synced(Weft::Postgres::ResultReader, 1)
    statuses = results.map { |r| r.is_a?(PG::Result) ? r.result_status : r }
    assert_equal [PG::PGRES_COMMAND_OK, nil, PG::PGRES_TUPLES_OK, nil, PG::PGRES_TUPLES_OK, nil, true], statuses
    assert_equal [{ "one" => "1" }], results[4].to_a
  end

  def test_the_c_sender_leaves_a_refused_statement_to_pg_s_error
    skip "the C reader is not bound" if Weft::Postgres::ResultReader::SENDER.nil?
    conn = PG.connect(postgres.conninfo)
    conn.prepare("weft_test_one", "select 1")
    conn.send_query("select pg_sleep(0.2)") # outside pipeline mode libpq takes one command at a time
    assert_equal false, Weft::Postgres::NativeSender.send_prepared(conn, "weft_test_one")
    error = assert_raises(PG::UnableToSend) { conn.send_query_prepared("weft_test_one", []) }
    assert_match(/another command is already in progress/, error.message)
    assert_equal [{ "pg_sleep" => "" }], conn.get_last_result.to_a, "the refused statement went nowhere"
  ensure
    conn&.close
  end

  def test_a_pool_sends_its_named_statements_without_parameters_through_the_c_sender
    skip "the C reader is not bound" if Weft::Postgres::ResultReader::SENDER.nil?
    sent = []
    counter = Module.new do
      define_method(:send_prepared) do |connection, name|
        sent << name
        super(connection, name)
      end
    end
    Weft::Postgres::NativeSender.singleton_class.prepend(counter)
    pool = Weft::Postgres::Pool.new(postgres.url, limit: 1)
    values = []
    Weft.run do
      tasks = Array.new(10) do |i|
        Weft.spawn do
          3.times do
            values << [nil, pool.query("select 7 as seven").getvalue(0, 0)]
            values << [i, pool.query("select $1::int as given", i).getvalue(0, 0)]
          end
        end
      end
      Weft.gather(tasks)
    end
    assert_equal 60, values.size
    values.each { |given, value| assert_equal((given || 7).to_s, value) }
    refute_empty sent, "no statement went through the C sender"
    assert_equal 1, sent.uniq.size, "only the parameterless `select 7` goes through it: #{sent.uniq}"
  ensure
    counter&.then { |mod| mod.send(:remove_method, :send_prepared) }
    pool&.close
  end

  private

  def send_segment(*statements)
    statements.each { |sql| @conn.send_query_params(sql, []) }
    @conn.__send__(Weft::Postgres::Pipeline::SEND_SYNC)
    @conn.flush
  end

  # Reads until `syncs` sync points came, as the pipeline's reader does; sets @failed.
  def take_until_synced(reader, syncs)
    results = []
    @failed = 0
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 5
    until results.count(true) == syncs
      flunk "the sync points did not come: #{results.inspect}" if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
      @conn.socket_io.wait_readable(0.1)
      @conn.consume_input
      @failed += reader.take(@conn, results, syncs - results.count(true))
    end
    results
  end
end
