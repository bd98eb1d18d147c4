# frozen_string_literal: true

require_relative "../test_helper"
require "active_record/connection_adapters/weft_postgresql_adapter"

# Weft runs task after task in one pooled fiber, and ActiveRecord keeps a connection leased with
# the fiber that leased it until it is given back or the fiber dies (Rails 7.1: any model query
# outside with_connection; 7.2 and 8.1: lease_connection, the deprecated connection). A task that
# ends holding one gives it back to ActiveRecord's pool as it ends (Weft::Task.on_end, hooked by
# Weft::Postgres::ActiveRecordTaskEnd), reset: the next task in that fiber finds no connection
# with its fiber, and the one it checks out has neither the earlier task's session nor its
# transaction. With `adapter: postgresql` (the weft/postgres/active_record way) and with
# weft_postgresql. ActiveRecord 7.2 on Ruby 3.1, 8.1 on 3.3; 7.1 in bin/test's Rails 7.1 step.
class PostgresActiveRecordTaskEndTest < Minitest::Test
  DATABASE = "weft_ar_task_end"

  # A model on the test database.
  class Note < ActiveRecord::Base
    self.table_name = "weft_task_end_notes"
  end

  def setup
    super
    @isolation_level = ActiveSupport::IsolatedExecutionState.isolation_level
    ActiveSupport::IsolatedExecutionState.isolation_level = :fiber
    postgres.create_database(DATABASE)
    postgres.psql("SET client_min_messages = warning; CREATE TABLE IF NOT EXISTS weft_task_end_notes (id bigserial PRIMARY KEY, tag text); " \
                  "TRUNCATE weft_task_end_notes", dbname: DATABASE)
  end

  def teardown
    ActiveRecord::Base.remove_connection
    ActiveRecord::ConnectionAdapters::WeftPostgreSQL::SharedDatabase.close_all
    ActiveSupport::IsolatedExecutionState.isolation_level = @isolation_level
    super
  end

  def test_postgresql_connection_a_task_left_leased_goes_back_reset_as_it_ends
    assert_next_task_gets_a_clean_connection("postgresql")
  end

  def test_weft_postgresql_adapter_a_task_left_leased_goes_back_reset_as_it_ends
    assert_next_task_gets_a_clean_connection("weft_postgresql")
  end

  # ActiveRecord's reset! would build the adapter's type map again (three catalog queries and
  # the map built from them, most of what a reset costs): a task's end keeps it, and the next
  # task still reads PostgreSQL's types through it, in a session set up as ActiveRecord sets
  # one up (its time zone UTC, not the database's default that DISCARD ALL goes back to).
  def test_postgresql_connection_reset_as_its_task_ends_keeps_its_type_map
    postgres.psql("ALTER DATABASE #{DATABASE} SET timezone = 'Asia/Tokyo'")
    ActiveRecord::Base.establish_connection(config("postgresql", pool: 1))
    pool = ActiveRecord::Base.connection_pool
    lease = pool.respond_to?(:lease_connection) ? :lease_connection : :connection
    sent_at_end = []
    task_done = false
    subscriber = ActiveSupport::Notifications.subscribe("sql.active_record") do |*, payload|
      sent_at_end << payload[:sql] if task_done
    end
    row = Weft.run do
      Weft.spawn do
        pool.public_send(lease).execute("SET statement_timeout = 4326")
        task_done = true # what is sent from here on, the task's end sends
      end.wait
      task_done = false
      Weft.spawn do
        pool.with_connection do |conn|
          conn.select_all("SELECT 2::int AS n, interval '2 days' AS span, current_setting('statement_timeout') AS timeout, " \
                          "current_setting('TimeZone') AS zone, timestamptz '2026-01-02 03:04:05+00' AS at").cast_values.first
        end
      end.wait
    end
    ActiveSupport::Notifications.unsubscribe(subscriber)
    assert_equal [2, 2.days, "0", "UTC", Time.utc(2026, 1, 2, 3, 4, 5)], row
    assert_includes sent_at_end, "SET intervalstyle = iso_8601", "the task's end did not set the session up again"
    assert_empty sent_at_end.grep(/pg_range/), "the task's end built the type map again"
  ensure
    postgres.psql("ALTER DATABASE #{DATABASE} RESET timezone")
  end

  # Rails 7.1 leases a connection for any model query outside with_connection: a task that ran
  # one gives it back as it ends, so a pool of one serves task after task, in any fiber. (The
  # last of the 20 waits for the 19 before it: 0.5 s of checkout_timeout was too little at a
  # load of 5-7; without the hand-back the second task waits for good, so any bound fails it.)
  def test_model_queries_in_many_tasks_share_a_pool_of_one
    ActiveRecord::Base.establish_connection(config("postgresql", pool: 1, checkout_timeout: 5))
    Weft.run do
      Array.new(20) { |i| Weft.spawn { Note.create!(tag: "t#{i}") } }.each(&:wait)
    end
    assert_equal 20, postgres.psql("SELECT count(*) AS n FROM weft_task_end_notes", dbname: DATABASE).first["n"].to_i
    assert_equal 0, ActiveRecord::Base.connection_pool.stat[:busy]
  end

  # A connection the ending task's fiber does not own stays where it is: transactional tests
  # share one with every fiber (lock_thread on 7.1, a pinned connection on 7.2 and 8.1), and a
  # task that uses it must not end the test's transaction.
  def test_a_connection_shared_by_the_test_thread_stays_in_its_transaction
    ActiveRecord::Base.establish_connection(config("postgresql", pool: 2))
    pool = ActiveRecord::Base.connection_pool
    if pool.respond_to?(:pin_connection!)
      pool.pin_connection!(true)
    else
      pool.lock_thread = true
      pool.connection.begin_transaction(joinable: false, _lazy: false)
    end
    begin
      shared = pool.respond_to?(:lease_connection) ? pool.lease_connection : pool.connection
      Weft.run do
        2.times do |i|
          Weft.spawn do
            # Leased with the task's fiber (Rails 7.2 and 8.1 lease the pinned connection)
            conn = pool.respond_to?(:lease_connection) ? pool.lease_connection : pool.connection
            conn.execute("INSERT INTO weft_task_end_notes (tag) VALUES ('in the test''s transaction #{i}')")
          end.wait
        end
      end
      assert shared.transaction_open?
      assert_equal 2, shared.select_value("SELECT count(*) FROM weft_task_end_notes").to_i
    ensure
      if pool.respond_to?(:unpin_connection!)
        pool.unpin_connection!
      else
        pool.connection.rollback_transaction
        pool.lock_thread = false
      end
    end
    assert_equal [], postgres.psql("SELECT tag FROM weft_task_end_notes", dbname: DATABASE)
  end

  private

  def config(adapter, **extra)
    { adapter: adapter, host: postgres.host, port: postgres.port, username: "postgres", database: DATABASE,
      checkout_timeout: 5 }.merge(extra)
  end

  # Task A leases a connection, changes its session and opens a transaction with raw SQL, and
  # ends. Tasks B run until one lands in A's fiber: it has no connection with its fiber, and the
  # one it checks out (the pool's only one) is clean. A's insert was rolled back, and the later
  # tasks' inserts did not join its transaction: they are committed.
  def assert_next_task_gets_a_clean_connection(adapter)
    ActiveRecord::Base.establish_connection(config(adapter, pool: 1, checkout_timeout: 1))
    pool = ActiveRecord::Base.connection_pool
    lease = pool.respond_to?(:lease_connection) ? :lease_connection : :connection
    first_fiber, busy_after_first, later = Weft.run do
      first = Weft.spawn do
        conn = pool.public_send(lease)
        conn.execute("SET statement_timeout = 4326")
        conn.execute("BEGIN")
        conn.execute("INSERT INTO weft_task_end_notes (tag) VALUES ('left in a transaction')")
        Fiber.current
      end.wait
      busy = pool.stat[:busy]
      seen = Array.new(3) do |i|
        Weft.spawn do
          held = pool.active_connection?
          pool.with_connection do |conn|
            Note.create!(tag: "later #{i}")
            [Fiber.current, held, conn.select_value("SHOW statement_timeout"), conn.transaction_open?]
          end
        end.wait
      end
      [first, busy, seen]
    end
    assert(later.any? { |fiber, *| fiber.equal?(first_fiber) }, "no later task ran in the first one's fiber")
    assert_equal 0, busy_after_first, "the first task's connection was not given back as it ended"
    assert_equal Array.new(3) { [nil, "0", false] }, later.map { |_, *rest| rest }
    assert_equal ["later 0", "later 1", "later 2"],
                 postgres.psql("SELECT tag FROM weft_task_end_notes ORDER BY id", dbname: DATABASE).map { |row| row["tag"] }
    assert_equal 0, pool.stat[:busy]
  end
end
