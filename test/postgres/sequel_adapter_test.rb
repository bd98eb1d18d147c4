# frozen_string_literal: true

require_relative "../test_helper"
require "logger"
require "open3"
require "rbconfig"
require "tmpdir"
require "sequel"
require "sequel/adapters/weft_postgres"

# Sequel's weft_postgres adapter on the throwaway cluster: fibers share the Weft pool's few
# connections, transactions and DB.synchronize pin one, results convert as with the stock
# postgres adapter, per-connection setup holds on every connection, and Sequel's features
# (datasets, insert returning, savepoints, migrations, schema, models) work on it.
class PostgresSequelAdapterTest < Minitest::Test
  include Weft::Test::PostgresPools

  Boom = Class.new(StandardError)

  def setup
    super
    @databases = []
  end

  def teardown
    @databases.each do |db|
      db.disconnect
      db.weft_pool.close if db.respond_to?(:weft_pool)
    end
    super
  end

  # A weft_postgres Database on the test cluster, closed after the test.
  def sequel(**options)
    connect(adapter: :weft_postgres, conn_str: postgres.url, **options)
  end

  def connect(*args, **options)
    Sequel.connect(*args, keep_reference: false, **options).tap { |db| @databases << db }
  end

  # Backend connections whose application_name is `tag`, at most, while the block runs.
  def most_backends(tag)
    monitor = PG.connect(postgres.conninfo)
    most = 0
    done = false
    sampler = Thread.new do
      until done
        count = monitor.exec_params("select count(*) from pg_stat_activity where application_name = $1", [tag])
        most = [most, count.getvalue(0, 0).to_i].max
        sleep 0.005
      end
    end
    yield
    done = true
    sampler.join
    most
  ensure
    done = true
    monitor&.close
  end

  def test_200_fibers_share_5_connections
    db = sequel(limit: 5, application_name: "weft_sequel_200")
    db.create_table!(:sq_load) do
      primary_key :id
      Integer :v
    end
    db[:sq_load].import([:v], (1..200).map { |v| [v] })
    elapsed = nil
    most = most_backends("weft_sequel_200") do
      values = reactor(60) do
        started = now
        tasks = Array.new(200) do |i|
          Weft.spawn do
            before = db[:sq_load].where(id: i + 1).get(:v)
            db[:sq_load].where(id: i + 1).update(v: before + 1000)
            db.get(Sequel.function(:pg_sleep, 0.05))
            echoed = db.get(Sequel.cast(i.to_s, Integer))
            db[:sq_load].where { v > 1000 }.count
            [db[:sq_load].where(id: i + 1).get(:v), echoed]
          end
        end
        Weft.gather(tasks).tap { elapsed = now - started }
      end
      assert_equal Array.new(200) { |i| [1001 + i, i] }, values
    end
    assert_includes 1..5, most, "backends seen beyond the Weft limit (or none seen at all)"
    stats = db.weft_pool.statistics
    assert_operator stats[:connects], :<=, 5
    assert_operator stats[:pipelined], :>, 0, "nothing was pipelined: #{stats.inspect}"
    # 200 sleeps of 0.05 s on 5 connections take 2 s at least: a sleep holds the statements
    # queued behind it on its connection, so the pool has to spread the sleeps to get near that.
    assert_operator elapsed, :>=, 1.9
    assert_operator elapsed, :<, 5.0, "200 fibers took #{elapsed.round(2)}s (pg_sleep bound: 2 s)"
  end

  # Each fiber commits or rolls back exactly its own rows; a fiber's statements outside its
  # transaction ("pre"), issued while other fibers' transactions that fail later are open, survive.
  def test_transactions_of_100_fibers_keep_to_their_own_work
    log = StringIO.new
    db = sequel(limit: 5, logger: Logger.new(log))
    db.create_table!(:sq_tx) do
      Integer :fiber
      String :step
    end
    rows = db[:sq_tx]
    nap = -> { db.get(Sequel.function(:pg_sleep, 0.01)) }
    expected = []
    reactor(60) do
      tasks = Array.new(100) do |i|
        Weft.spawn do
          sleep((i % 10) * 0.005)
          rows.insert(fiber: i, step: "pre")
          expected << [i, "pre"]
          case i % 5
          when 0
            db.transaction { rows.insert(fiber: i, step: "a"); nap.call; rows.insert(fiber: i, step: "b") }
            expected.push([i, "a"], [i, "b"])
          when 1
            assert_raises(Boom) { db.transaction { rows.insert(fiber: i, step: "a"); nap.call; raise Boom } }
          when 2 # a failed savepoint undoes its own rows only
            db.transaction do
              rows.insert(fiber: i, step: "outer")
              assert_raises(Boom) { db.transaction(savepoint: true) { rows.insert(fiber: i, step: "inner"); raise Boom } }
              nap.call
              rows.insert(fiber: i, step: "after")
            end
            expected.push([i, "after"], [i, "outer"])
          when 3 # a failed outer transaction undoes its released savepoint too
            assert_raises(Boom) do
              db.transaction do
                rows.insert(fiber: i, step: "outer")
                db.transaction(savepoint: true) { rows.insert(fiber: i, step: "inner") }
                nap.call
                raise Boom
              end
            end
          when 4
            db.transaction(rollback: :always) { rows.insert(fiber: i, step: "a"); nap.call }
          end
        end
      end
      Weft.gather(tasks)
    end
    assert_equal expected.sort, rows.select_map(%i[fiber step]).sort
    assert_match(/SAVEPOINT autopoint_1/, log.string)
    assert_match(/ROLLBACK TO SAVEPOINT autopoint_1/, log.string)
    stats = db.weft_pool.statistics
    assert_equal 0, stats[:pinned]
    assert_operator stats[:connects], :<=, 5
  end

  # Weft.deadline bounds a transaction: the statement it interrupts is cancelled on the server,
  # so the rollback does not wait for it, and the connection goes back to the pool clean.
  def test_a_deadline_inside_a_transaction_cancels_the_statement_and_rolls_back
    db = sequel(limit: 2)
    db.create_table!(:sq_deadline) { Integer :v }
    reactor do
      started = now
      assert_raises(Weft::DeadlineExceeded) do
        Weft.deadline(0.2) do
          db.transaction do
            db[:sq_deadline].insert(v: 1)
            db.get(Sequel.lit("pg_sleep(5) /* sq_deadline_sleep */"))
          end
        end
      end
      assert_operator now - started, :<, 2.0, "the rollback waited for the statement"
      assert_gone_from_server("sq_deadline_sleep")
      assert_equal 0, db[:sq_deadline].count
      stats = db.weft_pool.statistics
      assert_equal [0, 0], stats.values_at(:pinned, :discarded)
    end
  end

  TYPED_ROW = <<~SQL
    select 7::int as i, 9223372036854775807::bigint as big, 12.345::numeric as num, 'it''s'::text as t,
           true as yes, false as no, '2024-01-02 03:04:05.678+02'::timestamptz as ts, '2024-01-02'::date as d,
           '{"a": [1, null]}'::json as j, '{"b": true}'::jsonb as jb, array[1, 2, null]::int[] as arr,
           array['x', 'y z']::text[] as texts, null::int as n
  SQL

  def test_results_convert_as_with_the_stock_adapter
    stock = connect(postgres.url)
    assert_equal :postgres, stock.adapter_scheme
    db = sequel(limit: 1)
    expected = stock.fetch(TYPED_ROW).first
    assert_kind_of Integer, expected[:big]
    assert_kind_of Time, expected[:ts]
    assert_equal [expected] * 3, [db.fetch(TYPED_ROW).first, db.transaction { db.fetch(TYPED_ROW).first },
                                  db.synchronize { db.fetch(TYPED_ROW).first }]
    # Under pressure (one connection, 20 fibers) the results come down a pipeline.
    rows = reactor { Weft.gather(Array.new(20) { Weft.spawn { db.fetch(TYPED_ROW).first } }) }
    assert_operator db.weft_pool.statistics[:pipelined], :>, 0
    rows.each do |row|
      assert_equal expected, row
      assert_equal expected.transform_values(&:class), row.transform_values(&:class)
    end

    [stock, db].each { |database| database.extension(:pg_array, :pg_json) }
    expected = stock.fetch(TYPED_ROW).first
    assert_kind_of Sequel::Postgres::PGArray, expected[:arr]
    row = db.fetch(TYPED_ROW).first
    assert_equal expected, row
    assert_equal expected.transform_values(&:class), row.transform_values(&:class)
  end

  # Values written through the adapter's literals (escaped without a connection) and bound
  # variables read back as the stock adapter reads them.
  def test_literals_and_bound_variables_round_trip
    stock = connect(postgres.url)
    db = sequel(limit: 2)
    db.create_table!(:sq_values) do
      primary_key :id
      String :s
      File :blob
      Time :at
      TrueClass :flag
    end
    text = "it's a \\ backslash, é, \"quotes\""
    blob = Sequel.blob("\x00\x01'\\\xFF".b)
    at = Time.utc(2024, 5, 6, 7, 8, 9)
    holds = 0
    db.pool.singleton_class.prepend(Module.new { define_method(:hold) { |*args, &block| holds += 1; super(*args, &block) } })
    id = db[:sq_values].insert(s: text, blob: blob, at: at, flag: false)
    found = db[:sq_values].where(s: text).first
    assert_equal 0, holds, "escaping a literal held a connection"
    assert_equal stock[:sq_values].first(id: id), found
    assert_equal [text, blob, at, false], found.values_at(:s, :blob, :at, :flag)
    statement = db[:sq_values].where(id: :$id).select(:s)
    assert_equal text, statement.call(:first, id: id)[:s] # bound variable, through the Weft pool
    assert_equal text, statement.prepare(:first, :sq_by_id).call(id: id)[:s] # prepared, on one connection
  end

  # Bound variables inside a transaction run on the held connection as the Weft pool's named
  # statements, prepared the second time (Sequel's own prepared statements keep their names).
  def test_bound_variables_inside_a_transaction_are_the_pools_named_statements
    db = sequel(limit: 1)
    db.create_table!(:sq_bound) do
      primary_key :id
      Integer :n
    end
    insert = db[:sq_bound].prepare(:insert, :sq_insert, n: :$n)
    lookup = db[:sq_bound].where(n: :$n).select(:id)
    texts = db.transaction do
      3.times { |n| insert.call(n: n) }
      3.times { |n| assert_equal n + 1, lookup.call(:first, n: n)[:id] }
      db.synchronize { |conn| conn.exec("select statement from pg_prepared_statements").column_values(0) }
    end
    assert_equal 1, texts.count { |text| text.start_with?("SELECT \"id\" FROM \"sq_bound\"") }, texts.inspect
    assert_equal 1, texts.count { |text| text.start_with?("INSERT INTO \"sq_bound\"") }, texts.inspect # Sequel's sq_insert
    assert_equal 1, db.weft_pool.statistics[:prepared]
  end

  def test_every_connection_gets_the_per_connection_setup
    opened = Queue.new
    db = sequel(limit: 3, search_path: %w[sq_schema public], connect_sqls: ["set statement_timeout = 4321"],
                after_connect: ->(conn) { opened << conn.class; conn.exec("set weft.tag = 'after'") })
    db.run("create schema if not exists sq_schema")
    settings = reactor do
      Weft.gather(Array.new(30) do
        Weft.spawn do
          db.fetch("select current_setting('search_path') as path, current_setting('statement_timeout') as timeout, " \
                   "current_setting('weft.tag') as tag, current_setting('DateStyle') as style, " \
                   "current_setting('standard_conforming_strings') as strings, pg_sleep(0.02)::text as nap").first
        end
      end)
    end
    assert_equal [{ path: "sq_schema, public", timeout: "4321ms", tag: "after", style: "ISO, MDY", strings: "on", nap: "" }],
                 settings.uniq
    classes = Array.new(opened.size) { opened.pop }
    assert_equal Array.new(3, Sequel::Postgres::Adapter), classes
    assert_equal 3, db.weft_pool.statistics[:connects]
  end

  # Session state made inside DB.synchronize stays with the fiber's connection: each of 10
  # fibers on 2 connections sees its own temporary table, and holds an advisory lock.
  def test_synchronize_pins_a_session
    db = sequel(limit: 2)
    counts = reactor do
      Weft.gather(Array.new(10) do |i|
        Weft.spawn do
          db.synchronize do
            db.run("create temporary table sq_own (v int); insert into sq_own values (#{i}), (#{i})")
            db.with_advisory_lock(4242 + i) do
              db.get(Sequel.function(:pg_sleep, 0.01))
              [db[:sq_own].where(v: i).count, db.in_transaction?]
            end
          ensure
            db.run("drop table if exists sq_own")
          end
        end
      end)
    end
    assert_equal Array.new(10, [2, false]), counts
    assert_operator db.weft_pool.statistics[:connects], :<=, 2
  end

  # Outside DB.transaction and DB.synchronize a statement goes through the Weft pool's #query;
  # a setting of the transaction under way sent there (SET LOCAL, set_config(..., true)) held
  # for the statements of other fibers in its pipeline segment (the segment's implicit
  # transaction), where alone on a connection it changes nothing.
  def test_a_transaction_setting_outside_a_transaction_does_not_reach_other_fibers_statements
    db = sequel(limit: 1)
    setting = Sequel.function(:current_setting, "statement_timeout")
    seen = reactor(60) do
      Array.new(5) do # rounds of 30 fibers, two of which send a setting amid the others' statements
        tasks = Array.new(30) do |fiber|
          Weft.spawn do
            case fiber
            when 5 then db.execute("SET LOCAL statement_timeout = 4325") && nil
            when 15 then db.get(Sequel.function(:set_config, "statement_timeout", "4325", true)) && nil
            else db.get(setting)
            end
          end
        end
        tasks.map(&:wait).compact
      end.flatten
    end
    assert_operator db.weft_pool.statistics[:pipelined], :>, 100, "the statements were not pipelined"
    assert_equal({ "0" => 140 }, seen.tally)
  end

  def test_migrations_schema_and_models
    Sequel.extension :migration
    db = sequel(limit: 2)
    db.drop_table?(:sq_widgets, :schema_info)
    Dir.mktmpdir do |dir|
      File.write(File.join(dir, "001_widgets.rb"), <<~RUBY)
        Sequel.migration do
          change do
            create_table(:sq_widgets) do
              primary_key :id
              String :name, null: false
              Integer :count, default: 0
            end
          end
        end
      RUBY
      Sequel::Migrator.run(db, dir)
      assert_equal 1, db[:schema_info].get(:version)
      assert_equal %i[id name count], db.schema(:sq_widgets, reload: true).map(&:first)
      assert_equal :integer, db.schema(:sq_widgets).to_h[:count][:type]

      widget = Class.new(Sequel::Model(db[:sq_widgets]))
      created = reactor do
        Weft.gather(Array.new(20) { |i| Weft.spawn { widget.create(name: "w#{i}").id } })
      end
      assert_equal 20, created.uniq.size
      first = widget.first(name: "w0")
      first.update(count: 5)
      assert_equal 5, widget[first.id].count
      widget[created.last].destroy
      assert_equal 19, widget.count
      assert_raises(Sequel::ValidationFailed, Sequel::NotNullConstraintViolation) { widget.create(name: nil) }

      Sequel::Migrator.run(db, dir, target: 0)
      refute db.table_exists?(:sq_widgets)
    end
  end

  def test_run_takes_several_statements_and_errors_convert_as_usual
    db = sequel(limit: 2)
    db.run("drop table if exists sq_run; create table sq_run (id int primary key)")
    db[:sq_run].insert(id: 1)
    assert_raises(Sequel::UniqueConstraintViolation) { db[:sq_run].insert(id: 1) }
    assert_raises(Sequel::DatabaseError) { db.get(Sequel.lit("no_such_function()")) }
    assert_equal 1, db[:sq_run].count
  end

  # SQL given to DB.fetch or DB.execute_dui that is not one statement reading or writing rows
  # runs as the postgres adapter runs it (simple protocol, on a connection of its own): several
  # statements answer with the last one's rows, and commands that refuse a transaction block
  # work while the pool's statements are pipelined (each segment is one).
  def test_sql_other_than_one_data_statement_runs_as_with_the_postgres_adapter
    db = sequel(limit: 1)
    db.create_table!(:sq_multi) { Integer :v }
    outcome = reactor(30) do
      load = Array.new(20) { Weft.spawn { 3.times { db.get(Sequel.function(:pg_sleep, 0.02)) } } }
      sleep 0.03
      rows = db.fetch("insert into sq_multi values (1), (2); select count(*) as n from sq_multi").all
      changed = db.execute_dui("update sq_multi set v = v + 1; update sq_multi set v = v + 1 where v = 3")
      vacuumed = db.fetch("vacuum sq_multi").all
      # A data statement that changes the session (Weft's Pool#query refuses it) runs on a
      # connection of its own, as with the postgres adapter.
      locked = db.get(Sequel.function(:pg_try_advisory_lock, 4347))
      Weft.gather(load)
      [rows, changed, vacuumed, locked, db[:sq_multi].order(:v).select_map(:v)]
    end
    assert_equal [[{ n: 2 }], 1, [], true, [2, 4]], outcome
    assert_operator db.weft_pool.statistics[:pipelined], :>, 0, "the statements around were not pipelined"
  end

  # Sequel apps commonly load connection_validator (often with a timeout of -1: check every
  # connection before use). The Weft pool checks connections before use and replaces broken ones
  # itself, so the extension loads and its settings are accepted; it raised NoMethodError
  # (`sync`, which Sequel's threaded pools have). What it promises holds: after PostgreSQL
  # ended every connection, statements and transactions go on.
  def test_connection_validator_loads_and_broken_connections_are_replaced
    db = sequel(limit: 2, application_name: "sq-validator")
    db.extension(:connection_validator)
    db.pool.connection_validation_timeout = -1
    assert_equal [1, 1], reactor { Weft.gather(Array.new(2) { Weft.spawn { db.get(Sequel.function(:pg_sleep, 0.05)) && 1 } }) }
    PG.connect(postgres.conninfo) do |monitor|
      monitor.exec("select pg_terminate_backend(pid) from pg_stat_activity where application_name = 'sq-validator'")
    end
    sleep 0.1
    after = reactor { Weft.gather(Array.new(4) { |i| Weft.spawn { i.even? ? db.get(2) : db.transaction { db.get(3) } } }) }
    assert_equal [2, 3, 2, 3], after
    assert_raises(Sequel::Error) { db.extension(:connection_expiration) } # the Weft pool's max_age does its work
  end

  def test_disconnect_closes_idle_connections_and_the_database_goes_on
    db = sequel(limit: 3)
    reactor { Weft.gather(Array.new(6) { Weft.spawn { db.get(Sequel.function(:pg_sleep, 0.05)) } }) }
    assert_operator db.pool.size, :>, 0
    assert_equal 3, db.pool.max_size
    db.disconnect
    assert_equal 0, db.pool.size
    assert_equal 1, db.get(1)
  end

  def test_url_and_query_string_options
    db = connect("#{postgres.url.sub(/\Apostgres:/, 'weft-postgres:')}?max_connections=4&pool_timeout=2.5&pipelining=false")
    assert_kind_of Sequel::WeftPostgres::Database, db
    assert_equal 4, db.pool.max_size
    refute db.weft_pool.pipelining?
    assert_equal 1, db.get(1)
    assert_raises(Sequel::Error) { sequel(servers: { read_only: {} }) }
    assert_raises(Sequel::Error) { sequel(pool_class: :threaded) }
  end

  # Loading the adapter changes nothing process-wide; the deprecated entry point still works.
  def test_loading_sets_no_global_state_and_the_old_entry_point_still_works
    lib = File.expand_path("../../lib", __dir__)
    script = <<~RUBY
      require "sequel"
      db = Sequel.connect(adapter: :weft_postgres, conn_str: ARGV[0])
      print Sequel.current.equal?(Thread.current), " ", Weft::Postgres.const_defined?(:Sequel, false), " ", db.get(1)
    RUBY
    out, err, status = Open3.capture3(RbConfig.ruby, "-I", lib, "-e", script, postgres.url)
    assert status.success?, err
    assert_equal "true false 1", out

    legacy = <<~RUBY
      require "weft/postgres/sequel"
      db = Weft::Postgres::Sequel.connect(ARGV[0])
      print db.class, " ", db.get(1)
    RUBY
    out, err, status = Open3.capture3(RbConfig.ruby, "-W:deprecated", "-I", lib, "-e", legacy, postgres.url)
    assert status.success?, err
    assert_equal "Sequel::WeftPostgres::Database 1", out
    assert_match(/Weft::Postgres::Sequel.connect is deprecated/, err)
  end
end
