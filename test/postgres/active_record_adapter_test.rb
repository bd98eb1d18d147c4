# frozen_string_literal: true

require_relative "../test_helper"
require "open3"
require "rbconfig"
require "active_record/connection_adapters/weft_postgresql_adapter"

# `adapter: weft_postgresql` (ActiveRecord 7.2 on Ruby 3.1, 8.1 on 3.3; 7.1 in bin/test's Rails 7.1
# step, gemfiles/rails71.gemfile) against the throwaway cluster, under Weft's
# reactor: many fibers on few PostgreSQL connections, each fiber's transactions its own.
class PostgresActiveRecordAdapterTest < Minitest::Test
  DATABASE = "weft_ar_adapter"
  APPLICATION = "weft-ar-adapter-test"

  # A model on the test database.
  class Entry < ActiveRecord::Base
    self.table_name = "weft_entries"
  end

  def setup
    super
    @isolation_level = ActiveSupport::IsolatedExecutionState.isolation_level
    ActiveSupport::IsolatedExecutionState.isolation_level = :fiber
    postgres.create_database(DATABASE)
    ActiveRecord::Base.establish_connection(config)
    ActiveRecord::Base.connection_pool.with_connection do |conn|
      conn.create_table(:weft_entries, force: true) do |t|
        t.integer :fiber
        t.string :tag
        t.bigint :xid, default: -> { "txid_current()" }
      end
      # Inside the block: on Rails 7.1 it takes the fiber's adapter (Model.connection) and would
      # keep it past the block.
      Entry.reset_column_information
    end
  end

  def teardown
    ActiveRecord::Base.remove_connection
    ActiveRecord::ConnectionAdapters::WeftPostgreSQL::SharedDatabase.close_all
    ActiveSupport::IsolatedExecutionState.isolation_level = @isolation_level
    super
  end

  # The fibers' statements run side by side on the pool's connections: PostgreSQL is seen
  # sleeping for two or more of them at once (sampled every 10 ms; on one connection at a time
  # the 200 sleeps take 10 s, on five 2 s). Not the run's wall time: its statements' CPU, on
  # both sides, stretches with the machine's load (13.8 s under two busy loops on 3.3).
  def test_ar_pool_of_five_serves_two_hundred_fibers_on_at_most_five_connections
    elapsed = nil
    results = nil
    sleeping = nil
    core_before = Weft::ThreadStatistics.calling_thread
    backends = watch_backends do
      started = Weft::Timers.now
      sleeping = watch_backends_sleeping do
        results = Weft.run do
          Weft.timeout(30) do
            tasks = Array.new(200) do |fiber|
              Weft.spawn do
                ActiveRecord::Base.connection_pool.with_connection do |conn|
                  Entry.create!(fiber: fiber, tag: "load")
                  values = [conn.select_value("select #{fiber}"), Entry.where(fiber: fiber).count,
                            Entry.where(fiber: fiber).pick(:tag), conn.select_value("select pg_sleep(0.05)::text")]
                  values << Entry.where(fiber: fiber).exists?
                  values
                end
              end
            end
            Weft.gather(tasks)
          end
        end
      end
      elapsed = Weft::Timers.now - started
    end
    if ENV["VERBOSE"]
      puts format("\n200 fibers x (5 statements + pg_sleep(0.05)), AR pool 5, Weft limit 5: %.2fs, " \
                  "backends at most %d, sleeping at most %d, %p", elapsed, backends.max, sleeping.max, shared_pool.statistics)
    end
    assert_equal Array.new(200) { |fiber| [fiber, 1, "load", "", true] }, results
    assert_operator backends.max, :<=, 5, "PostgreSQL saw more than 5 connections of the app"
    assert_operator backends.max, :>=, 2, "the statements did not spread over the pool's connections"
    assert_operator sleeping.max, :>=, 2,
                    format("no two sleeps at once in %d samples over %.2f s", sleeping.size, elapsed)
    assert_equal 200, Entry.where(tag: "load").distinct.count(:fiber)
    stats = shared_pool.statistics
    assert_operator stats[:connects], :<=, 5, stats.inspect
    assert_operator stats[:pipelined], :>, 0, "no statement was pipelined: #{stats.inspect}"
    # With 200 sleeps for 5 connections, every connection carries one most of the time: the
    # ones that come then queue behind the sleep due to end first (docs/postgres.md, "Routing").
    return if stats[:queued_behind_slow].positive?

    # A sleep counts as due to end soon only for twice its length after it began (pool.rb's
    # #behind_slow): a reactor thread kept off the cores sees every sleep as older than that,
    # and none queues behind one (once beside four busy loops). Told apart by how long the
    # thread waited for a core.
    waited = (core_wait_since(core_before) || 0.0) / elapsed
    message = "no sleep queued behind another (#{stats.inspect}); the reactor's thread waited " \
              "for a core #{(waited * 100).round}% of the run"
    skip "#{message}: the machine's load" if waited >= 0.15
    flunk message
  end

  def test_each_fibers_transaction_commits_or_rolls_back_its_own_work_only
    outcomes = Weft.run do
      Weft.timeout(30) do
        # Each fiber gives its adapter back as it ends: Rails 7.1 checks one out for the fiber at
        # its first query and keeps it there until released (Rails' executor does that per request).
        tasks = Array.new(100) do |fiber|
          Weft.spawn { ActiveRecord::Base.connection_pool.with_connection { run_transaction_kind(fiber) } }
        end
        Weft.gather(tasks)
      end
    end
    assert_equal Array.new(100) { |fiber| fiber % 5 == 1 ? :rolled_back : :ok }, outcomes
    rows = Entry.order(:id).to_a.group_by(&:fiber)
    100.times do |fiber|
      tags = rows.fetch(fiber, []).map(&:tag).sort
      expected = case fiber % 5
                 when 0 then %w[after-inner outer]   # inner savepoint raised and was rolled back
                 when 1 then []                      # the whole transaction raised
                 when 2 then %w[inner outer]         # nested savepoint released, all committed
                 when 3 then %w[outer]               # ActiveRecord::Rollback in the savepoint
                 else %w[auto-1 auto-2]              # no transaction: each statement commits
                 end
      assert_equal expected, tags, "fiber #{fiber}"
    end
    # A transaction's rows carry its own transaction id, and no other fiber's row does.
    by_xid = Entry.all.group_by(&:xid)
    by_xid.each_value { |same| assert_equal 1, same.map(&:fiber).uniq.size, same.map(&:fiber).inspect }
    rows.each { |fiber, entries| assert_equal 2, entries.map(&:xid).uniq.size, "fiber #{fiber}" if fiber % 5 == 4 }
    assert_equal 0, shared_pool.statistics[:pinned], "a transaction kept its connection"
  end

  def test_session_state_keeps_a_connection_until_checkin_then_is_cleared
    Weft.run do
      ActiveRecord::Base.connection_pool.with_connection do |conn|
        conn.execute("SET statement_timeout = 1234")
        assert_equal "1234ms", conn.select_value("show statement_timeout")
        assert conn.select_value("select pg_try_advisory_lock(77)")
        assert_equal 1, shared_pool.statistics[:pinned]
      end
      assert_equal 0, shared_pool.statistics[:pinned]
      ActiveRecord::Base.connection_pool.with_connection do |conn|
        assert_equal "0", conn.select_value("show statement_timeout")
        assert_equal 0, conn.select_value("select count(*) from pg_locks where locktype = 'advisory'")
        assert_equal "UTC", conn.select_value("show timezone")
        assert_equal "iso_8601", conn.select_value("show intervalstyle")
      end
    end
  end

  # Session changes that StatementScope's text test missed, each through the real pool on its
  # one connection: a second fiber's statement must not see the first fiber's session state,
  # neither while the first holds its ActiveRecord connection nor after it gave it back.
  def test_session_changes_do_not_leak_into_another_fibers_statements
    ActiveRecord::Base.establish_connection(config.merge(pool: 1))
    timeout = ["SHOW statement_timeout", "0"]
    temp_table = ->(name) { ["SELECT to_regclass('#{name}')::text", nil] }
    cases = {
      "SELECT 1 AS a INTO TEMP weft_leak_into" => temp_table.call("weft_leak_into"),
      "CREATE TABLE pg_temp.weft_leak_qualified (a int)" => temp_table.call("weft_leak_qualified"),
      "EXPLAIN ANALYZE CREATE TEMP TABLE weft_leak_explained AS SELECT 1" => temp_table.call("weft_leak_explained"),
      "DO $$BEGIN SET statement_timeout = 4322; END$$" => timeout,
      %(SELECT "set_config"('statement_timeout', '4323', false)) => timeout,
      "SELECT pg_advisory_lock /* one */ (4324)" =>
        ["SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()", 0]
    }
    seen = Weft.run do
      cases.map do |sql, (probe, _)|
        changer = Weft.spawn do
          ActiveRecord::Base.connection_pool.with_connection do |conn|
            conn.execute(sql)
            sleep 0.1 # keeps its ActiveRecord connection while the other fiber queries
          end
        end
        prober = Weft.spawn do
          sleep 0.02
          ActiveRecord::Base.connection_pool.with_connection { |conn| conn.select_value(probe) }
        end
        changer.wait
        prober.wait
      end
    end
    cases.zip(seen).each do |(sql, (probe, clean)), value|
      message = "#{sql} leaked into another fiber's statement (#{probe})"
      clean.nil? ? assert_nil(value, message) : assert_equal(clean, value, message)
    end
    assert_equal 0, shared_pool.statistics[:pinned]
  end

  # A SET LOCAL outside a transaction changes nothing on a connection of its own (PostgreSQL
  # warns), but sent to the shared pool it joined a pipeline segment's implicit transaction,
  # which other fibers' statements share: they ran with its setting. Rails 7.2 sends
  # exec_query's statements that way (exec_params); 8.1 sends this one in the simple protocol,
  # which leases.
  def test_set_local_outside_a_transaction_does_not_reach_other_fibers_statements
    ActiveRecord::Base.establish_connection(config.merge(pool: 1))
    seen = Weft.run do
      Array.new(5) do # rounds of 30 fibers, two of which send SET LOCAL amid the others' statements
        tasks = Array.new(30) do |fiber|
          Weft.spawn do
            ActiveRecord::Base.connection_pool.with_connection do |conn|
              next conn.exec_query("SET LOCAL statement_timeout = 4325") && nil if [5, 15].include?(fiber)
              conn.select_value("SELECT current_setting('statement_timeout')")
            end
          end
        end
        tasks.map(&:wait).compact
      end.flatten
    end
    assert_operator shared_pool.statistics[:pipelined], :>, 100, "the statements were not pipelined"
    assert_equal({ "0" => 140 }, seen.tally)
  end

  # `execute` (and on Rails 8.1 every query: it sends those without binds in the simple
  # protocol) shares the pool when the text is one statement that reads or writes rows; several
  # statements and DDL run in the simple protocol on a connection leased for them.
  def test_execute_shares_single_data_statements_and_leases_the_rest
    Weft.run do
      ActiveRecord::Base.connection_pool.with_connection do |conn|
        queries = -> { shared_pool.statistics[:queries] }
        before = queries.call
        conn.execute("INSERT INTO weft_entries (fiber, tag) VALUES (1, 'a;b')") # a semicolon in a literal
        assert_equal "a;b", conn.select_value("SELECT tag FROM weft_entries WHERE fiber = 1")
        assert_equal before + 2, queries.call, "single statements did not go through Pool#query"
        result = conn.execute("INSERT INTO weft_entries (fiber, tag) VALUES (2, 'c'); SELECT count(*) FROM weft_entries")
        assert_equal 2, Integer(result.getvalue(0, 0))
        conn.execute("CREATE INDEX CONCURRENTLY weft_entries_tag ON weft_entries (tag)") # refused in a transaction
        assert_equal before + 2, queries.call, "several statements or DDL went through Pool#query"
        assert_equal 0, shared_pool.statistics[:pinned], "a statement kept its leased connection"
      end
    end
    assert_equal ["weft_entries_tag"], postgres.psql("select indexname from pg_indexes where indexname = 'weft_entries_tag'",
                                                     dbname: DATABASE).map { |row| row["indexname"] }
  end

  # COPY's data travels on the connection after the statement's answer, as with `adapter:
  # postgresql`: `execute("COPY ... FROM STDIN")`, then the rows through raw_connection (and
  # COPY ... TO STDOUT read back the same way). A COPY left open when the ActiveRecord
  # connection goes back costs that PostgreSQL connection (the server waits for data), and
  # nothing else: the pool's one connection serves the next statement at once.
  def test_copy_keeps_its_connection_for_the_data_and_one_left_open_costs_only_that_connection
    ActiveRecord::Base.establish_connection(config.merge(pool: 1, checkout_timeout: 2))
    copied = Weft.run do
      ActiveRecord::Base.connection_pool.with_connection do |conn|
        conn.execute("COPY weft_entries (fiber, tag) FROM STDIN")
        raw = conn.raw_connection
        raw.put_copy_data("1\tcopied\n2\tcopied\n")
        raw.put_copy_end
        raw.get_last_result
        conn.execute("COPY (SELECT fiber FROM weft_entries ORDER BY fiber) TO STDOUT")
        raw = conn.raw_connection
        rows = []
        while (row = raw.get_copy_data)
          rows << row
        end
        raw.get_last_result
        rows
      end
    end
    assert_equal ["1\n", "2\n"], copied
    outcome = Weft.run do
      Weft.timeout(10) do
        ActiveRecord::Base.connection_pool.with_connection { |conn| conn.execute("COPY weft_entries (tag) FROM STDIN") }
        started = Weft::Timers.now
        count = ActiveRecord::Base.connection_pool.with_connection { Entry.count }
        [count, Weft::Timers.now - started]
      end
    end
    assert_equal 2, outcome[0]
    assert_operator outcome[1], :<, 1.5, "the next statement waited for the connection the open COPY held"
    assert_equal 0, shared_pool.statistics[:pinned]
  end

  # ActiveRecord's ConnectionPool#disconnect! (also remove_connection, establish_connection
  # again) takes back adapters still checked out after checkout_timeout and disconnects them. A
  # fiber whose statement was running on its transaction's connection then must fail, as on a
  # PG::Connection closed under it: its statement answered nil instead, and its transaction
  # block ended as if committed, its rows gone (rolled back as the connection went back to the
  # pool, whose reads raced the fiber's own on the socket). Nor may it read another fiber's
  # results from the connection, which serves others next.
  def test_a_statement_running_when_disconnect_takes_its_adapter_fails
    ActiveRecord::Base.establish_connection(config.merge(pool: 1, checkout_timeout: 0.5))
    outcome, others = Weft.run do
      Weft.timeout(20) do
        owner = Weft.spawn do
          ActiveRecord::Base.connection_pool.with_connection do |conn|
            Entry.transaction do
              Entry.create!(fiber: 1, tag: "taken")
              conn.select_value("SELECT 'owner ' || pg_sleep(2)::text")
            end
          end
        rescue ActiveRecord::ActiveRecordError => e
          e
        end
        sleep 0.1
        Weft.spawn { ActiveRecord::Base.connection_pool.disconnect! }.wait
        other = Weft.spawn do
          ActiveRecord::Base.connection_pool.with_connection { |conn| Array.new(20) { |i| conn.select_value("SELECT 'other #{i}'") } }
        end
        [owner.wait, other.wait]
      end
    end
    assert_kind_of ActiveRecord::ActiveRecordError, outcome, "the statement answered #{outcome.inspect}"
    assert_equal Array.new(20) { |i| "other #{i}" }, others
    assert_equal 0, Entry.count
    assert_equal 0, shared_pool.statistics[:pinned]
  end

  # disconnect! while 20 fibers run transactions on 3 connections, three times: each statement
  # answers its own value or fails, and no connection stays out of the pool. A fiber still
  # waiting for a connection (its transaction's BEGIN) when disconnect! closed its adapter got
  # it afterwards on the closed routed connection, which ActiveRecord had dropped: its
  # transaction stayed open there for good (all 3 connections in 2 runs of 3, every later
  # statement then timing out).
  def test_disconnect_under_load_answers_each_statement_its_own_and_leaks_no_connection
    ActiveRecord::Base.establish_connection(config.merge(pool: 3, checkout_timeout: 0.3))
    pool = shared_pool # the one this configuration shares, before disconnect! takes its adapters
    outcomes = Weft.run do
      Weft.timeout(60) do
        workers = Array.new(20) do |fiber|
          Weft.spawn do
            ActiveRecord::Base.connection_pool.with_connection do |conn|
              Array.new(5) do |round|
                answer = Entry.transaction do
                  Entry.create!(fiber: fiber, tag: "round #{round}")
                  conn.select_value("SELECT '#{fiber}/#{round}' || pg_sleep(#{(fiber % 4) * 0.05})::text")
                end
                answer == "#{fiber}/#{round}" ? :own : answer
              rescue StandardError => e # ActiveRecord's own races when it takes adapters in use (NoMethodError on nil)
                e.class
              end
            end
          rescue ActiveRecord::ActiveRecordError => e
            # disconnect! takes the adapters still leased after checkout_timeout (steal!), and the
            # fiber that had one gets "Cannot expire connection, it is not currently leased" when
            # with_connection gives it back (ActiveRecord 8.1, once in a 3.3 run)
            raise unless e.message.include?("not currently leased")
            [e.class]
          end
        end
        3.times do
          sleep 0.4
          Weft.spawn { ActiveRecord::Base.connection_pool.disconnect! }
        end
        Weft.gather(workers).flatten
      end
    end
    strays = outcomes.reject { |outcome| outcome == :own || (outcome.is_a?(Class) && outcome <= StandardError) }
    assert_empty strays, "statements answered another's value or nothing"
    assert_includes outcomes, :own
    deadline = Weft::Timers.now + 5
    sleep 0.05 until pool.statistics[:pinned].zero? || Weft::Timers.now > deadline
    assert_equal 0, pool.statistics[:pinned], "connections stayed out of the pool"
    assert_kind_of Integer, Weft.run { ActiveRecord::Base.connection_pool.with_connection { Entry.count } }
  end

  # No PostgreSQL connection free within checkout_timeout raises ConnectionTimeoutError after
  # checkout_timeout, as ActiveRecord's own pool does. ActiveRecord took it (a
  # ConnectionNotEstablished) for a dropped connection: it reconnected, which waited for a
  # connection again for its own queries, and ran the statement again, so that the caller
  # waited three to four times as long and the saturated pool got more to do.
  def test_no_connection_within_checkout_timeout_raises_after_it_once
    ActiveRecord::Base.establish_connection(config.merge(pool: 1, checkout_timeout: 1))
    ActiveRecord::Base.connection_pool.with_connection { Entry.count } # the adapter set up, its type map built
    error, waited = Weft.run do
      Weft.timeout(20) do
        holder = Weft.spawn do
          ActiveRecord::Base.connection_pool.with_connection { Entry.transaction { Entry.create!(fiber: 1, tag: "x") && sleep(2.5) } }
        end
        sleep 0.1
        started = Weft::Timers.now
        error = begin
          ActiveRecord::Base.connection_pool.with_connection { Entry.count }
        rescue ActiveRecord::ConnectionTimeoutError => e
          e
        end
        waited = Weft::Timers.now - started
        holder.wait
        [error, waited]
      end
    end
    assert_kind_of ActiveRecord::ConnectionTimeoutError, error
    assert_operator waited, :<, 1.8, "waited #{waited.round(2)}s for a checkout_timeout of 1 s"
  end

  # A transaction interrupted in a statement or in its COMMIT (a deferred constraint trigger
  # makes COMMIT slow) by Weft.deadline, Weft.timeout or a cancelled task: the caller gets the
  # error (none for the cancelled task, which ends), nothing of it is committed, and the one
  # PostgreSQL connection goes back out of the transaction: the next statements, through the
  # same adapter or another fiber's, commit on their own (seen from another connection).
  def test_a_transaction_interrupted_in_a_statement_or_in_commit_leaves_nothing_behind
    ActiveRecord::Base.establish_connection(config.merge(pool: 1))
    ActiveRecord::Base.connection_pool.with_connection do |conn|
      conn.execute(<<~SQL)
        CREATE FUNCTION weft_slow_commit() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep(3); RETURN NULL; END $$;
        CREATE CONSTRAINT TRIGGER weft_slow_commit AFTER INSERT ON weft_entries DEFERRABLE INITIALLY DEFERRED
          FOR EACH ROW WHEN (NEW.tag = 'slow commit') EXECUTE FUNCTION weft_slow_commit();
      SQL
    end
    interruptions = {
      deadline: ->(work) { Weft.deadline(0.3) { work.call } },
      timeout: ->(work) { Weft.timeout(0.3) { work.call } },
      cancel: lambda do |work|
        task = Weft.spawn { ActiveRecord::Base.connection_pool.with_connection { work.call } }
        sleep 0.3
        task.cancel
        task.wait
        :cancelled
      end,
    }
    works = {
      "in a statement" => -> { Entry.transaction { Entry.create!(fiber: 1, tag: "doomed") && Entry.connection_pool.with_connection { |conn| conn.select_value("SELECT pg_sleep(3)") } } },
      "in COMMIT" => -> { Entry.transaction { Entry.create!(fiber: 1, tag: "slow commit") } },
    }
    seen = Weft.run do
      Weft.timeout(60) do
        interruptions.flat_map do |how, interrupt|
          works.map do |where, work|
            ActiveRecord::Base.connection_pool.with_connection do |conn|
              outcome = begin
                interrupt.call(work)
              rescue Weft::TimeoutError => e
                e.class
              end
              Entry.create!(fiber: 2, tag: "#{how} #{where}: after, same adapter")
              Weft.spawn { ActiveRecord::Base.connection_pool.with_connection { Entry.create!(fiber: 3, tag: "#{how} #{where}: other fiber") } }.wait
              [how, where, outcome, conn.transaction_open?]
            end
          end
        end
      end
    end
    expected = interruptions.keys.product(works.keys).map do |how, where|
      [how, where, { deadline: Weft::DeadlineExceeded, timeout: Weft::TimeoutError, cancel: :cancelled }[how], false]
    end
    assert_equal expected, seen
    tags = postgres.psql("SELECT tag FROM weft_entries ORDER BY id", dbname: DATABASE).map { |row| row["tag"] }
    assert_equal interruptions.keys.product(works.keys).flat_map { |how, where| ["#{how} #{where}: after, same adapter", "#{how} #{where}: other fiber"] }, tags
    deadline = Weft::Timers.now + 5
    sleep 0.05 until shared_pool.statistics[:pinned].zero? || Weft::Timers.now > deadline
    assert_equal 0, shared_pool.statistics[:pinned]
  end

  # Weft runs the next task in a finished task's fiber, and ActiveRecord keeps an adapter with
  # the fiber that leased it until it is given back (Rails 7.1: any model query; 7.2 and 8.1:
  # lease_connection, the deprecated connection). The next task there gets the adapter, but not
  # the earlier task's session or transaction: those reached it (its statement_timeout, its
  # open transaction, which the next task's inserts joined).
  def test_the_next_task_in_a_reused_fiber_does_not_get_the_earlier_tasks_session_or_transaction
    ActiveRecord::Base.establish_connection(config.merge(pool: 1, checkout_timeout: 1)) # teardown waits for the kept adapter
    lease = ActiveRecord::Base.respond_to?(:lease_connection) ? :lease_connection : :connection
    first_fiber, later = Weft.run do
      first = Weft.spawn do
        conn = ActiveRecord::Base.public_send(lease)
        conn.execute("SET statement_timeout = 4326")
        conn.execute("BEGIN")
        conn.execute("INSERT INTO weft_entries (fiber, tag) VALUES (1, 'left in a transaction')")
        Fiber.current
      end.wait
      seen = Array.new(3) do |i|
        Weft.spawn do
          ActiveRecord::Base.connection_pool.with_connection do |conn|
            Entry.create!(fiber: 2, tag: "later #{i}")
            [Fiber.current, conn.select_value("SHOW statement_timeout"), conn.transaction_open?]
          end
        end.wait
      end
      [first, seen]
    end
    assert(later.any? { |fiber, _| fiber.equal?(first_fiber) }, "no later task ran in the first one's fiber")
    assert_equal Array.new(3) { ["0", false] }, later.map { |_, timeout, open| [timeout, open] }
    tags = postgres.psql("SELECT tag FROM weft_entries ORDER BY id", dbname: DATABASE).map { |row| row["tag"] }
    assert_equal ["later 0", "later 1", "later 2"], tags
    assert_equal 0, shared_pool.statistics[:pinned]
  end

  # Rails' database tasks drop a database after using it in the same process (db:drop checks
  # ar_internal_metadata first, db:reset, db:test:prepare's purge): they disconnect
  # ActiveRecord's pool, then send DROP DATABASE, which PostgreSQL refuses while any connection
  # to the database is open. The shared pool's idle connections stayed open ("database is being
  # accessed by other users"); disconnecting a pool of the adapter now closes them.
  def test_database_tasks_drop_and_purge_a_database_this_process_used
    require "active_record/tasks/database_tasks"
    db_config = ActiveRecord::DatabaseConfigurations::HashConfig.new("test", "primary", config.merge(database: "weft_ar_dropped"))
    capture_io do
      2.times do |round|
        ActiveRecord::Tasks::DatabaseTasks.create(db_config)
        ActiveRecord::Base.establish_connection(db_config)
        ActiveRecord::Base.connection_pool.with_connection { |conn| conn.create_table(:weft_gone) }
        # purge drops and creates the database again; drop leaves it gone
        round.zero? ? ActiveRecord::Tasks::DatabaseTasks.purge(db_config) : ActiveRecord::Tasks::DatabaseTasks.drop(db_config)
      end
    end
    assert_empty postgres.psql("SELECT datname FROM pg_database WHERE datname = 'weft_ar_dropped'")
  ensure
    ActiveRecord::Base.establish_connection(config)
  end

  # PostgreSQL ends every connection of the app (a restart, pg_terminate_backend): the next
  # statements and transactions, through adapters that used the old connections, go on.
  def test_statements_and_transactions_go_on_after_postgresql_ended_the_connections
    ActiveRecord::Base.establish_connection(config.merge(pool: 2))
    counts = Weft.run do
      Weft.timeout(20) do
        ActiveRecord::Base.connection_pool.with_connection do |conn|
          Weft.gather(Array.new(4) { Weft.spawn { ActiveRecord::Base.connection_pool.with_connection { |c| c.select_value("SELECT pg_sleep(0.05)") } } })
          ended = postgres.psql("SELECT count(pg_terminate_backend(pid)) AS n FROM pg_stat_activity WHERE application_name = '#{APPLICATION}'")
          assert_operator Integer(ended.first["n"]), :>=, 1
          sleep 0.1
          others = Array.new(4) { |i| Weft.spawn { ActiveRecord::Base.connection_pool.with_connection { i.even? ? Entry.count : Entry.transaction { Entry.create!(fiber: i, tag: "after") && Entry.count } } } }
          [Entry.count, *Weft.gather(others)]
        end
      end
    end
    assert_equal 5, counts.size
    assert_equal 2, Entry.where(tag: "after").count
  end

  # `pool:` (or `max_connections:`, Rails 8.1's name) caps PostgreSQL connections; ActiveRecord's
  # own pool holds `lease_limit:` adapters (1000 by default), on 7.1, 7.2 and 8.1 alike.
  def test_pool_caps_postgresql_connections_and_lease_limit_sizes_activerecords_pool
    assert_equal 1000, ActiveRecord::Base.connection_pool.size
    assert_equal 5, shared_pool.statistics[:limit]
    ActiveRecord::Base.establish_connection(config.except(:pool).merge(max_connections: 7, lease_limit: 50))
    assert_equal 50, ActiveRecord::Base.connection_pool.size
    assert_equal 7, shared_pool.statistics[:limit]
  end

  def test_a_transaction_under_a_fiber_scheduler_needs_fiber_isolation
    ActiveSupport::IsolatedExecutionState.isolation_level = :thread
    error = Weft.run do
      ActiveRecord::Base.transaction { Entry.create!(fiber: 1, tag: "x") }
    rescue ActiveRecord::ConnectionAdapters::WeftPostgreSQLAdapter::IsolationLevelError => e
      e
    end
    assert_kind_of ActiveRecord::ConnectionAdapters::WeftPostgreSQLAdapter::IsolationLevelError, error
    assert_equal 0, Entry.count
  end

  # ActiveRecord's prepared statements (on by default) send binds as parameters, and the shared
  # pool names each text it sees again per connection: the texts reach PostgreSQL with `$1`,
  # are prepared on the pool's connections (not by ActiveRecord, whose names would live on one),
  # and a schema change that alters what a prepared statement returns stays invisible. Off, the
  # values are written into the SQL and nothing is prepared.
  def test_prepared_statements_are_the_shared_pools
    run_lookups = lambda do
      Weft.run do
        Weft.gather(Array.new(20) do |fiber|
          Weft.spawn do
            ActiveRecord::Base.connection_pool.with_connection do
              Array.new(3) { |round| Entry.where(fiber: fiber, tag: "r#{round}").to_a.size }
            end
          end
        end)
      end
    end
    Entry.insert_all(Array.new(20) { |fiber| { fiber: fiber, tag: "r1" } })
    assert_equal Array.new(20) { [0, 1, 0] }, run_lookups.call
    pool = shared_pool
    assert_operator pool.statistics[:prepared], :>, 0
    texts = Weft.run do # every connection's, each pinned by a fiber of its own meanwhile
      Weft.gather(Array.new(pool.statistics[:size]) do
        Weft.spawn { pool.with { |conn| conn.exec("select statement from pg_prepared_statements").column_values(0).tap { sleep 0.1 } } }
      end).flatten
    end
    lookups = texts.grep(/weft_entries/)
    refute_empty lookups, texts.inspect
    assert(lookups.all? { |text| text.include?("$1") }, lookups.inspect) # binds, not values in the text
    ActiveRecord::Base.connection_pool.with_connection { |conn| conn.add_column(:weft_entries, :extra, :integer) }
    Entry.reset_column_information
    assert_equal Array.new(20) { [0, 1, 0] }, run_lookups.call # 0A000 after the new column: sent again unnamed

    ActiveRecord::Base.remove_connection
    ActiveRecord::ConnectionAdapters::WeftPostgreSQL::SharedDatabase.close_all
    ActiveRecord::Base.establish_connection(config.merge(prepared_statements: false))
    assert_equal Array.new(20) { [0, 1, 0] }, run_lookups.call
    assert_equal 0, shared_pool.statistics[:prepared]
  end

  # Writes inside transactions (most of ActiveRecord's) are named on the leased connection the
  # second time their text runs there, as the shared pool's statements are; a schema change
  # between them fails none (an INSERT's RETURNING "id" keeps its type; a whole-row SELECT,
  # `weft_entries".*`, goes unnamed inside a transaction).
  def test_writes_inside_transactions_are_prepared_on_the_leased_connection
    ActiveRecord::Base.establish_connection(config.merge(pool: 1))
    write = lambda do |round|
      Weft.run do
        Entry.transaction do
          entry = Entry.create!(fiber: round, tag: "t#{round}")
          entry.update!(tag: "u#{round}")
          Entry.lock.find(entry.id).tag
        end
      end
    end
    assert_equal %w[u0 u1 u2], Array.new(3) { |round| write.call(round) }
    texts = Weft.run { shared_pool.with { |conn| conn.exec("select statement from pg_prepared_statements").column_values(0) } }
    assert_equal 1, texts.grep(/\AINSERT INTO "weft_entries"/).size, texts.inspect
    assert_equal 1, texts.grep(/\AUPDATE "weft_entries"/).size, texts.inspect
    assert_empty texts.grep(/FOR UPDATE/), "a whole-row SELECT was named inside a transaction"
    ActiveRecord::Base.connection_pool.with_connection { |conn| conn.add_column(:weft_entries, :extra, :integer) }
    Entry.reset_column_information
    assert_equal %w[u3 u4], Array.new(2) { |round| write.call(round + 3) }
    assert_equal 5, Entry.count
  end

  # The migrator takes a session advisory lock on the adapter it migrates with (Rails 7.1-8.1),
  # which holds one of the shared pool's connections for that adapter as any session change
  # does, and ActiveRecord keeps the adapter leased after the migration (DatabaseTasks'
  # lease_connection, Rails 7.1's Base.connection): a migration at boot, in a script or in a
  # test's setup left that connection pinned, and with `pool: 1` every other fiber's statement
  # waited checkout_timeout and failed. The lock unlocked, the connection is shared again.
  def test_migrating_on_one_connection_leaves_it_shared_for_other_fibers
    ActiveRecord::Base.establish_connection(config.merge(pool: 1, checkout_timeout: 5))
    with_widget_migration do |dir|
      # Outside a reactor, as a boot-time migration before the server starts.
      ActiveRecord::MigrationContext.new(dir).migrate
      assert_equal 0, shared_pool.statistics[:pinned], "the migrating adapter kept the pool's only connection"
      assert_equal %w[0 1 2], Weft.run { query_in_other_fibers(3) }
      ActiveRecord::MigrationContext.new(dir).rollback
      # Inside one: the migrating task goes on, holding its adapter, while others query.
      Weft.run do
        ActiveRecord::MigrationContext.new(dir).migrate
        assert_equal 0, shared_pool.statistics[:pinned], "the migrating adapter kept the pool's only connection"
        assert_equal %w[0 1 2], query_in_other_fibers(3)
      end
      assert ActiveRecord::Base.connection_pool.with_connection { |conn| conn.table_exists?(:weft_widgets) }
      assert_equal "0", postgres.psql("select count(*) from pg_locks where locktype = 'advisory'", dbname: DATABASE).first["count"]
    end
  end

  # A migration that finds the migrator's lock taken elsewhere fails at once
  # (ConcurrentMigrationError, as with `postgresql`), and its failed try keeps no connection.
  def test_a_migration_refused_the_lock_keeps_no_connection
    ActiveRecord::Base.establish_connection(config.merge(pool: 1, checkout_timeout: 5))
    lock_id = ActiveRecord::Migrator::MIGRATOR_SALT * Zlib.crc32(DATABASE)
    with_widget_migration do |dir|
      postgres.connect(DATABASE) do |other|
        other.exec("select pg_advisory_lock(#{lock_id})")
        assert_raises(ActiveRecord::ConcurrentMigrationError) { ActiveRecord::MigrationContext.new(dir).migrate }
        assert_equal 0, shared_pool.statistics[:pinned], "the refused try kept the pool's only connection"
        assert_equal %w[0 1], Weft.run { query_in_other_fibers(2) }
        # Given back here: a closed connection's backend ends, and lets go of its locks, a
        # moment after the close (the migration below was refused once in a loaded run).
        other.exec("select pg_advisory_unlock(#{lock_id})")
      end
      ActiveRecord::MigrationContext.new(dir).migrate # the lock free again
      assert_equal [20_240_101_000_000], ActiveRecord::MigrationContext.new(dir).get_all_versions
    end
  end

  def test_migrations_schema_cache_explain_and_load_async
    with_widget_migration do |dir|
      context = ActiveRecord::MigrationContext.new(dir)
      context.migrate
      assert_equal [20_240_101_000_000], context.get_all_versions
      context.rollback
      refute ActiveRecord::Base.connection_pool.with_connection { |conn| conn.table_exists?(:weft_widgets) }
      context.migrate
    end
    # The migrator's advisory lock is gone, and its connection shared again (also while the
    # adapter is still leased: test_migrating_on_one_connection_leaves_it_shared_for_other_fibers).
    ActiveRecord::Base.connection_pool.release_connection
    assert_equal 0, shared_pool.statistics[:pinned], "the migrator's advisory lock kept its connection"
    assert_equal "0", postgres.psql("select count(*) from pg_locks where locktype = 'advisory'").first["count"]
    widget = Class.new(ActiveRecord::Base) { self.table_name = "weft_widgets" }
    widget.create!(name: "w", span: 2.days)
    assert_equal 2.days, widget.first.span # PostgreSQL's interval type, through the adapter's type map

    cache = ActiveRecord::Base.connection_pool.with_connection(&:schema_cache) # the pool's has none on Rails 7.1
    cache.clear!
    assert cache.data_source_exists?("weft_widgets")
    assert_equal %w[id name span], cache.columns_hash("weft_widgets").keys
    Dir.mktmpdir do |dir|
      path = File.join(dir, "schema_cache.yml")
      cache.dump_to(path)
      assert_match(/weft_widgets/, File.read(path))
    end

    assert_match(/Index (Only )?Scan|Seq Scan|Bitmap/, widget.where(name: "w").explain.inspect)

    # load_async on ActiveRecord's global thread pool: the query runs on another thread, through
    # the same shared pool.
    executor = ActiveRecord.async_query_executor
    ActiveRecord.async_query_executor = :global_thread_pool
    ActiveRecord::Base.establish_connection(config) # the executor is chosen as the pool is made
    Weft.run do
      # A query session, as Rails' executor opens around each request (Rails 8 refuses
      # load_async outside one; 7.2 ran it without).
      tracker = ActiveRecord::Base.asynchronous_queries_tracker
      tracker.start_session
      # In a block that gives the adapter back: Rails 7.1 would keep it for this task's fiber.
      ActiveRecord::Base.connection_pool.with_connection do
        relation = widget.where(name: "w").load_async
        assert relation.scheduled?, "load_async ran in the foreground"
        assert_equal ["w"], relation.map(&:name)
      end
    ensure
      tracker&.finalize_session
    end
  ensure
    ActiveRecord.async_query_executor = executor
  end

  def test_transactional_fixtures_roll_back_between_tests
    url = postgres.url(DATABASE).sub("postgres://", "weft-postgresql://")
    suite = File.join(__dir__, "apps", "transactional_fixtures_suite.rb")
    output, status = Open3.capture2e({ "DATABASE_URL" => url }, RbConfig.ruby, "-I", File.expand_path("../../lib", __dir__),
                                     suite)
    assert status.success?, output
    assert_match(/4 runs, \d+ assertions, 0 failures, 0 errors/, output)
    assert_equal %w[one two], postgres.psql("select body from weft_notes order by body", dbname: DATABASE)
                                      .map { |row| row["body"] }
  end

  # Adapters of one database share one type map, built once by the first adapter that connects
  # (three catalog queries on pg_type and pg_range), though many fibers on several threads
  # connect theirs at once.
  def test_adapters_share_one_type_map_built_once
    ActiveRecord::Base.remove_connection
    ActiveRecord::ConnectionAdapters::WeftPostgreSQL::SharedDatabase.close_all # no map yet
    ActiveRecord::Base.establish_connection(config)
    builds = []
    subscriber = ActiveSupport::Notifications.subscribe("sql.active_record") do |*, payload|
      builds << payload[:sql] if payload[:sql].include?("pg_range") && !payload[:sql].include?("t.oid IN")
    end
    adapters = Array.new(4) do
      Thread.new do
        Weft.run do
          Weft.timeout(30) do
            Weft.gather(Array.new(10) do
              Weft.spawn do
                ActiveRecord::Base.connection_pool.with_connection do |conn|
                  conn.select_value("select 1") # connects it
                  [conn, conn.send(:type_map)]
                end
              end
            end)
          end
        end
      end
    end.flat_map(&:value)
    assert_operator adapters.map(&:first).uniq.size, :>, 1, "one adapter served them all: nothing was shared"
    assert_equal 1, adapters.map { |_, map| map.object_id }.uniq.size, "the adapters have type maps of their own"
    assert_equal 3, builds.size, "the type map was built #{builds.size / 3.0} times"
  ensure
    ActiveSupport::Notifications.unsubscribe(subscriber) if subscriber
  end

  # A type added through one adapter (ActiveRecord rebuilds the type map after create_enum)
  # reaches the others at once: they read the rebuilt shared map.
  def test_a_type_added_through_one_adapter_reaches_the_others
    pool = ActiveRecord::Base.connection_pool
    adding = pool.checkout
    other = pool.checkout
    refute_same adding, other
    [adding, other].each(&:verify!)
    adding.drop_enum(:weft_mood, if_exists: true)
    before = other.send(:type_map)
    adding.create_enum(:weft_mood, %w[happy sad])
    oid = adding.select_value("select 'weft_mood'::regtype::oid").to_i
    refute before.key?(oid)
    after = other.send(:type_map)
    refute before.equal?(after), "the type map was not rebuilt"
    assert after.equal?(adding.send(:type_map)), "the adapter that rebuilt it does not use the new map"
    assert_instance_of ActiveRecord::ConnectionAdapters::PostgreSQL::OID::Enum, after.lookup(oid)
  ensure
    adding&.drop_enum(:weft_mood, if_exists: true)
    pool.checkin(adding) if adding
    pool.checkin(other) if other
  end

  private

  def config
    { adapter: "weft_postgresql", host: postgres.host, port: postgres.port, username: "postgres",
      database: DATABASE, pool: 5, application_name: APPLICATION, checkout_timeout: 20 }
  end

  def shared_pool
    ActiveRecord::Base.connection_pool
                      .with_connection { |conn| conn.tap(&:verify!).instance_variable_get(:@raw_connection) } # connected
                      .instance_variable_get(:@database).pool
  end

  # One fiber's work, by kind (fiber % 5): transactions with a failing, a released and a
  # rolled-back savepoint, one that raises after a pause (others run meanwhile), and plain
  # statements outside any transaction in between.
  def run_transaction_kind(fiber)
    case fiber % 5
    when 0
      Entry.transaction do
        Entry.create!(fiber: fiber, tag: "outer")
        begin
          Entry.transaction(requires_new: true) do
            Entry.create!(fiber: fiber, tag: "inner")
            raise ArgumentError, "inner fails"
          end
        rescue ArgumentError
          nil
        end
        Entry.create!(fiber: fiber, tag: "after-inner")
      end
    when 1
      begin
        Entry.transaction do
          Entry.create!(fiber: fiber, tag: "doomed")
          Entry.connection_pool.with_connection { |conn| conn.select_value("select pg_sleep(0.05)::text") }
          raise ArgumentError, "outer fails"
        end
      rescue ArgumentError
        return :rolled_back
      end
    when 2
      Entry.transaction do
        Entry.create!(fiber: fiber, tag: "outer")
        Entry.transaction(requires_new: true) { Entry.create!(fiber: fiber, tag: "inner") }
      end
    when 3
      Entry.transaction do
        Entry.create!(fiber: fiber, tag: "outer")
        Entry.transaction(requires_new: true) do
          Entry.create!(fiber: fiber, tag: "inner")
          raise ActiveRecord::Rollback
        end
      end
    else
      Entry.create!(fiber: fiber, tag: "auto-1")
      sleep 0.01
      Entry.create!(fiber: fiber, tag: "auto-2")
    end
    :ok
  end

  # Yields a folder with one migration, creating weft_widgets, quietly.
  def with_widget_migration
    verbose = ActiveRecord::Migration.verbose
    ActiveRecord::Migration.verbose = false
    Dir.mktmpdir do |dir|
      File.write(File.join(dir, "20240101000000_create_weft_widgets.rb"), <<~RUBY)
        class CreateWeftWidgets < ActiveRecord::Migration[7.1]
          def change
            create_table(:weft_widgets) { |t| t.string :name, null: false; t.interval :span }
            add_index :weft_widgets, :name
          end
        end
      RUBY
      yield dir
    end
  ensure
    ActiveRecord::Migration.verbose = verbose
  end

  # Runs a query in each of `count` new tasks, each with an ActiveRecord connection of its own.
  # @return [Array<String>] their answers
  def query_in_other_fibers(count)
    Weft.timeout(30) do
      tasks = Array.new(count) do |index|
        Weft.spawn { ActiveRecord::Base.connection_pool.with_connection { |conn| conn.select_value("select '#{index}'") } }
      end
      Weft.gather(tasks)
    end
  end

  # Runs the block while a thread counts the app's backends in pg_stat_activity every 10 ms,
  # once those of earlier tests have gone (a backend lingers a moment after its client left).
  # @return [Array<Integer>] the counts seen
  def watch_backends(&block)
    where = "application_name = $1 and datname = $2"
    postgres.connect(DATABASE) do |conn|
      deadline = Weft::Timers.now + 5
      while conn.exec_params("select count(*) from pg_stat_activity where #{where}", [APPLICATION, DATABASE]).getvalue(0, 0).to_i.positive?
        break if Weft::Timers.now >= deadline
        sleep 0.01
      end
    end
    postgres.count_backends_while(where, [APPLICATION, DATABASE], from: DATABASE, &block)
  end

  # @return [Array<Integer>] how many of the app's backends were in pg_sleep, every 10 ms while
  #   the block ran
  def watch_backends_sleeping(&block)
    where = "application_name = $1 and datname = $2 and wait_event = 'PgSleep'"
    postgres.count_backends_while(where, [APPLICATION, DATABASE], from: DATABASE, &block)
  end
end
