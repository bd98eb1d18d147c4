# frozen_string_literal: true

require_relative "test_helper"

# The schema and the SQL, on a real PostgreSQL.
class RingpoolStoreTest < Minitest::Test
  include Ringpool::Test::Helpers

  def setup
    @url = fresh_database
  end

  def test_migrate_is_idempotent_and_safe_from_several_processes_at_once
    url = postgres.create_database("ringpool_concurrent_#{SecureRandom.hex(4)}")
    pids = Array.new(3) do
      fork do
        db = Weft::Postgres::Pool.new(url, limit: 1)
        Weft.run { Ringpool::Schema.migrate(db) }
        exit!(0)
      rescue StandardError => e
        warn e.full_message
        exit!(1)
      end
    end
    assert(pids.all? { |pid| Process.wait2(pid).last.success? }, "a concurrent migration failed")
    with_db(url) { |db| assert_equal [], Ringpool::Schema.migrate(db) }
    versions = Ringpool::Schema::MIGRATIONS.keys.sort.map { |version| { "version" => version.to_s } }
    assert_equal versions, postgres.psql("select version from ringpool_schema order by version", dbname: url.split("/").last)
  end

  # A database made by migration 1 (text exclusion constraint, id, foreign key) with
  # allocations in it: migration 2 (and those after it) keep them, and they still block an
  # overlapping allocation.
  def test_a_version_1_database_migrates_with_its_allocations_and_keeps_the_guarantee
    url = postgres.create_database("ringpool_v1_#{SecureRandom.hex(4)}")
    with_db(url) do |db|
      db.transaction do |conn|
        conn.exec("create table ringpool_schema (version integer primary key)")
        conn.exec(Ringpool::Schema::MIGRATIONS.fetch(1))
        conn.exec("insert into ringpool_schema values (1)")
      end
      store = Ringpool::Store.new(db)
      pool = store.create_pool(name: "old", numbers: numbers(1), overflow_number: "+15559999999", lockout_seconds: 60)
      old = Ringpool::PoolState.new(pool, store.numbers_with_lockouts([pool.id]).fetch(pool.id)).pick
      db.query("insert into allocations (ring_pool_id, number, lockout, params) values ($1, $2, tstzrange($3, $4), '{}')",
               pool.id, old.number, Ringpool::Clock.iso8601(old.locked_from), Ringpool::Clock.iso8601(old.locked_until))
      assert_equal Ringpool::Schema::MIGRATIONS.keys.sort - [1], Ringpool::Schema.migrate(db)
      again = Ringpool::PoolState.new(pool, [[old.number, 0]]).pick(old.locked_from + 1_000_000)
      assert_equal [], store.record([[again, "{}"]]), "an allocation made before the migration was overlapped"
      assert_equal "1", store.report(pool.id)["allocations"]
    end
  end

  # PostgreSQL itself refuses a number twice within overlapping lockouts, whatever the shards
  # believe: two states that both think they own the pool hand out the same number, and only
  # one of the two allocations is stored.
  def test_the_exclusion_constraint_refuses_a_double_allocation
    with_db(@url) do |db|
      store = Ringpool::Store.new(db)
      pool = store.create_pool(name: "p", numbers: numbers(2), overflow_number: "+15559999999", lockout_seconds: 60)
      one = Ringpool::PoolState.new(pool, store.numbers_with_lockouts([pool.id]).fetch(pool.id))
      two = Ringpool::PoolState.new(pool, store.numbers_with_lockouts([pool.id]).fetch(pool.id))
      now = Ringpool::Clock.now
      first = one.pick(now)
      second = two.pick(now + 1_000_000) # a second later, inside the first one's lockout
      assert_equal first.number, second.number
      assert_equal true, store.record([[first, '{"a":1}']]), "every row stored: told by the count alone"
      assert_equal [], store.record([[second, '{"b":2}']]), "the overlapping allocation was stored"
      # After the first lockout ends, the number may be handed out again.
      later = two.pick(now + 61_000_000)
      later = two.pick(now + 61_000_000) if later.number != first.number
      assert_equal true, store.record([[later, '{"c":3}']])
      count = db.query("select count(*) from allocations where number = $1", first.number).getvalue(0, 0)
      assert_equal "2", count
    end
  end

  def test_a_batch_stores_the_rows_that_do_not_conflict_and_counts_overflows
    with_db(@url) do |db|
      store = Ringpool::Store.new(db)
      pool = store.create_pool(name: "p", numbers: numbers(3), overflow_number: "+15559999999", lockout_seconds: 60)
      rows = store.numbers_with_lockouts([pool.id]).fetch(pool.id)
      ahead = Ringpool::PoolState.new(pool, rows)
      taken = ahead.pick
      store.record([[taken, "{}"]])
      state = Ringpool::PoolState.new(pool, rows)
      picks = Array.new(3) { state.pick }
      stored = store.record(picks.map { |pick| [pick, '{"k":"v"}'] })
      # Some refused: the rows stored, by number and exact lockout start.
      assert_equal picks.reject { |pick| pick.number == taken.number }.map { |pick| [pick.number, pick.locked_from] }.sort, stored.sort
      store.add_overflows({ [pool.id, "exhausted"] => 2 })
      store.add_overflows({ [pool.id, "exhausted"] => 1, [pool.id, "shard_unavailable"] => 4, [pool.id + 1, "exhausted"] => 1 })
      report = store.report(pool.id)
      assert_equal({ "exhausted" => 3, "shard_unavailable" => 4 }, JSON.parse(report["overflows"]))
      assert_equal "3", report["allocations"]
    end
  end

  def test_attribution_finds_the_allocation_covering_an_instant
    with_db(@url) do |db|
      store = Ringpool::Store.new(db)
      number = numbers(1).first
      pool = store.create_pool(name: "p", numbers: [number], overflow_number: "+15559999999", lockout_seconds: 10)
      state = Ringpool::PoolState.new(pool, [[number, 0]])
      t0 = 1_700_000_000_000_000
      first = state.pick(t0)
      second = state.pick(t0 + 10_000_000)
      store.record([[first, '{"campaign":"one"}'], [second, '{"campaign":"two"}']])
      assert_equal '{"campaign": "one"}', store.attribution(first.number, t0)[:params]
      assert_equal '{"campaign": "one"}', store.attribution(first.number, t0 + 9_999_999)[:params]
      assert_equal '{"campaign": "two"}', store.attribution(first.number, t0 + 10_000_000)[:params]
      assert_nil store.attribution(first.number, t0 + 20_000_000)
      assert_nil store.attribution(first.number, t0 - 1)
      assert_nil store.attribution("+15559999999", t0), "overflow numbers are never attributed"
    end
  end

  def test_numbers_already_in_a_pool_are_refused
    with_db(@url) do |db|
      store = Ringpool::Store.new(db)
      taken = numbers(2)
      store.create_pool(name: "a", numbers: taken, overflow_number: "+15559999999", lockout_seconds: 10)
      error = assert_raises(Ringpool::Store::NumbersTaken) do
        store.create_pool(name: "b", numbers: [taken.last, "+15558888888"], overflow_number: "+15559999999", lockout_seconds: 10)
      end
      assert_equal [taken.last], error.numbers
      assert_equal 1, store.pools.size
    end
  end
end
