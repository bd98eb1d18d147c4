# frozen_string_literal: true

require_relative "test_helper"

# Catalog#refresh against a store whose pools become visible out of id order, as concurrent
# creations that commit in a different order than they took their ids.
class RingpoolCatalogTest < Minitest::Test
  Pool = Struct.new(:id)

  # Answers `pools(after:)` from the pools made visible so far, and records each `after`.
  class FakeStore
    attr_reader :afters

    def initialize
      @visible = []
      @afters = []
    end

    def show(*ids)
      @visible.concat(ids)
    end

    def pools(after: 0, ids: nil)
      @afters << after
      @visible.select { |id| id > after && (ids.nil? || ids.include?(id)) }.sort.map { |id| Pool.new(id) }
    end
  end

  def setup
    @now = 1_000.0
    @store = FakeStore.new
    @catalog = Ringpool::Catalog.new(@store, clock: -> { @now })
  end

  def test_a_pool_committed_after_a_later_one_is_still_found
    @store.show(1, 2, 4) # 3 took its id first but has not committed yet
    @catalog.refresh
    assert_equal [1, 2, 4], @catalog.ids.sort
    @now += 1
    @store.show(3)
    @catalog.refresh
    assert_equal [1, 2, 3, 4], @catalog.ids.sort, "3 is found though 4 was seen before it"
  end

  def test_refreshes_ask_only_for_ids_above_the_settled_mark
    @store.show(1, 2)
    @catalog.refresh
    @now += 10
    @store.show(3)
    @catalog.refresh
    assert_equal [0, 0], @store.afters, "nothing settled yet"
    @now += Ringpool::Catalog::SETTLE
    @catalog.refresh
    @catalog.refresh
    assert_equal 3, @store.afters.last, "after SETTLE s, ids up to the highest seen then are not asked for again"
    assert_equal [1, 2, 3], @catalog.ids.sort
  end

  # A refresh reads the pools of the last SETTLE seconds again every tick: the objects held stay,
  # so that a fresh copy of each does not live a tick, get promoted and die old.
  def test_a_refresh_keeps_the_objects_of_pools_it_knows
    @store.show(1, 2)
    @catalog.refresh
    held = @catalog[1]
    @now += 1
    @catalog.refresh
    assert_equal [0, 0], @store.afters, "not settled yet: the second refresh read pool 1 again"
    assert_same held, @catalog[1]
  end

  def test_resolve_looks_up_unknown_ids_at_once
    @store.show(5, 6)
    @catalog.resolve([5, 5, 7])
    assert_equal [5], @catalog.ids
  end
end

# The snapshot file: written when a refresh learns pools, read by a shard that starts while
# PostgreSQL is unreachable, replaced by PostgreSQL's answer once it is back.
class RingpoolCatalogSnapshotTest < Minitest::Test
  def pool(id, overflow = "+1555000#{id.to_s.rjust(4, '0')}")
    Ringpool::RingPool.new(id: id, overflow_number: overflow, lockout_seconds: 60)
  end

  # pools(after:) from a list; raises like an unreachable PostgreSQL when down.
  class Store
    attr_accessor :pools_list, :down

    def pools(after: 0, ids: nil)
      raise PG::ConnectionBad, "down" if down
      pools_list.select { |pool| pool.id > after && (ids.nil? || ids.include?(pool.id)) }
    end
  end

  def test_a_new_shard_knows_the_pools_while_postgresql_is_down
    Dir.mktmpdir do |dir|
      path = File.join(dir, "catalog.json")
      store = Store.new
      store.pools_list = [pool(1), pool(2)]
      Ringpool::Catalog.new(store, snapshot: path).refresh
      assert File.exist?(path)

      store.down = true
      replaced = Ringpool::Catalog.new(store, snapshot: path)
      assert_equal 2, replaced.load_snapshot
      assert_equal "+15550000002", replaced[2].overflow_number
      assert_raises(PG::ConnectionBad) { replaced.refresh }
      assert_equal [1, 2], replaced.ids.sort

      # Back up, and PostgreSQL says otherwise about pool 2 (a snapshot of an older database):
      # its answer wins, and is written.
      store.down = false
      store.pools_list = [pool(1), pool(2, "+15559999999"), pool(3)]
      replaced.refresh
      assert_equal "+15559999999", replaced[2].overflow_number
      assert_equal [1, 2, 3], JSON.parse(File.read(path)).map(&:first).sort
    end
  end

  def test_a_bad_snapshot_is_ignored
    Dir.mktmpdir do |dir|
      path = File.join(dir, "catalog.json")
      File.write(path, "{not json")
      assert_equal 0, Ringpool::Catalog.new(Store.new, snapshot: path).load_snapshot
      File.write(path, '[["x", "+1", 1]]')
      assert_equal 0, Ringpool::Catalog.new(Store.new, snapshot: path).load_snapshot
    end
  end
end
