# frozen_string_literal: true

require_relative "test_helper"

# Ownership through a PostgreSQL restart: every shard loses its lock session at once, and each
# should take back its own pools from the state it kept, not the first one back all of them.
class RingpoolOwnershipTest < Minitest::Test
  include Ringpool::Test::Helpers

  POOLS = 6

  def test_after_a_postgres_restart_each_shard_takes_back_its_own_pools
    cluster = Weft::Test::PostgresCluster.new.start # a private one: this test restarts it
    db = fresh_database(cluster)
    with_db(db) do |pool_db|
      store = Ringpool::Store.new(pool_db)
      POOLS.times { |i| store.create_pool(name: "p#{i}", numbers: numbers(3), overflow_number: "+15550999999", lockout_seconds: 60) }
      shards = %w[a b].map { |name| shard(name, db, store) }
      settle(shards)
      before = shards.map { |shard| shard[:allocator].owned_ids.sort }
      takeovers = shards.map { |shard| shard[:ownership].takeovers }
      assert_equal [POOLS / 2] * 2, before.map(&:size)
      processes = sql(db, "select process from ringpool_shards order by url").map { |row| row["process"] }

      cluster.stop(mode: :fast)
      cluster.start
      shards.each do |shard| # each notices its lock session is gone and drops its pools
        assert_raises(PG::Error) { shard[:ownership].tick }
        assert_empty shard[:allocator].owned_ids
      end
      shards.each { |shard| shard[:ownership].tick } # the first one back does not take the other's

      assert_equal before, shards.map { |shard| shard[:allocator].owned_ids.sort }
      taken_back = shards.zip(takeovers).map { |shard, was| shard[:ownership].takeovers.to_h { |how, count| [how, count - was[how]] } }
      assert_equal [{ retained: POOLS / 2, loaded: 0 }] * 2, taken_back, "taken back from the kept states, nothing read"
      assert_equal processes, sql(db, "select process from ringpool_shards order by url").map { |row| row["process"] },
                   "a lock session anew, the same processes"
    ensure
      shards&.each { |shard| shard[:ownership].close }
    end
  ensure
    cluster&.destroy
  end

  # A killed shard's pools are another's at its next tick: its heartbeat is recent, but it
  # came after PostgreSQL started, and its lock session is gone.
  def test_a_shard_whose_session_ended_counts_no_more
    db = fresh_database
    with_db(db) do |pool_db|
      store = Ringpool::Store.new(pool_db)
      POOLS.times { |i| store.create_pool(name: "p#{i}", numbers: numbers(3), overflow_number: "+15550999999", lockout_seconds: 60) }
      shards = %w[a b].map { |name| shard(name, db, store) }
      settle(shards)
      gone = sql(db, "select pid from ringpool_shards where url = $1", shards.last[:ownership].url).first["pid"]
      shards.last[:ownership].close # its session ends; its row and recent heartbeat stay
      # The backend ends a moment after the client closes: until then it holds the locks.
      wait_until(5, "the closed session's backend to end") { sql(db, "select 1 from pg_stat_activity where pid = $1", gone).none? }
      shards.first[:ownership].tick
      assert_equal POOLS, shards.first[:allocator].owned_ids.size
    ensure
      shards&.each { |shard| shard[:ownership].close }
    end
  end

  private

  def shard(name, db, store)
    allocator = Ringpool::Allocator.new(store)
    ownership = Ringpool::Ownership.new(url: "unix:///tmp/ownership-test-#{name}.sock", database_url: db, store: store,
                                        catalog: Ringpool::Catalog.new(store), allocator: allocator, interval: 1.0)
    { ownership: ownership, allocator: allocator }
  end

  # Ticks the shards in turn until each holds its fair share. (The tests tick by hand; the
  # interval only sets how recent a heartbeat must be, three intervals.)
  def settle(shards)
    10.times do
      shards.each { |shard| shard[:ownership].tick }
      break if shards.all? { |shard| shard[:allocator].owned_ids.size == POOLS / shards.size }
    end
    assert_equal [POOLS / shards.size] * shards.size, shards.map { |shard| shard[:allocator].owned_ids.size }
  end
end
