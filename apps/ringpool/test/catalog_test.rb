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

  def test_resolve_looks_up_unknown_ids_at_once
    @store.show(5, 6)
    @catalog.resolve([5, 5, 7])
    assert_equal [5], @catalog.ids
  end
end
