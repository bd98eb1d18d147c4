# frozen_string_literal: true

require_relative "test_helper"

# Metrics (one shard's counts) and Dashboard.summarize (every shard's, added up), without servers.
class RingpoolMetricsTest < Minitest::Test
  Pool = Struct.new(:id, :overflow_number)

  def setup
    @now = 1_000_000
    @metrics = Ringpool::Metrics.new(clock: -> { @now })
  end

  def results(tracked: 0, exhausted: 0, errors: 0, pool: 7)
    Array.new(tracked) { Ringpool::Result.tracked(pool, "+15550000001", 1) } +
      Array.new(exhausted) { Ringpool::Result.overflow(Pool.new(pool, "+15550000000"), "exhausted") } +
      Array.new(errors) { Ringpool::Result.error(pool, "invalid_params", "bad") }
  end

  def test_buckets_are_twenty_percent_wide_and_percentiles_fall_in_them
    [0.00005, 0.001, 0.0123, 0.2, 3.0].each do |seconds|
      bucket = Ringpool::Metrics.bucket(seconds)
      upper = Ringpool::Metrics.bucket_ms(bucket)
      assert_operator upper, :>=, seconds * 1000 - 1e-9
      assert_operator upper, :<=, [seconds * 1000 * 1.2, 0.1].max + 1e-9
    end
    assert_equal Ringpool::Metrics::BUCKETS - 1, Ringpool::Metrics.bucket(10_000)
    histogram = Hash.new(0)
    90.times { histogram[Ringpool::Metrics.bucket(0.010)] += 1 }
    10.times { histogram[Ringpool::Metrics.bucket(0.500)] += 1 }
    assert_in_delta 10, Ringpool::Metrics.percentile(histogram, 0.5), 2
    assert_in_delta 10, Ringpool::Metrics.percentile(histogram, 0.9), 2
    assert_in_delta 500, Ringpool::Metrics.percentile(histogram, 0.99), 100
    assert_nil Ringpool::Metrics.percentile({}, 0.5)
  end

  def test_counts_per_second_and_forgets_what_left_the_window
    @metrics.record(results(tracked: 3, exhausted: 1, errors: 1), 0.004)
    @now += 1
    @metrics.record(results(tracked: 2, pool: 8), 0.02)
    snapshot = @metrics.snapshot
    assert_equal [1_000_000, 1_000_001], snapshot["seconds"].map { |second| second["at"] }
    first = snapshot["seconds"].first
    assert_equal [1, 4, 1, { "exhausted" => 1 }], first.values_at("requests", "items", "errors", "overflows")
    assert_equal({ 7 => 4, 8 => 2 }, snapshot["pools"])

    @now += Ringpool::Metrics::POOL_WINDOW - 1
    assert_equal({ 8 => 2 }, @metrics.snapshot["pools"], "pool counts cover the last minute")
    @now += Ringpool::Metrics::WINDOW
    @metrics.record(results(tracked: 1), 0.001)
    assert_equal [@now], @metrics.snapshot["seconds"].map { |second| second["at"] }, "old seconds dropped, their slots reused"
  end

  def test_summarize_adds_shards_up_and_leaves_the_current_second_out
    other = Ringpool::Metrics.new(clock: -> { @now })
    @metrics.record(results(tracked: 10), 0.002)
    other.record(results(exhausted: 5, pool: 9), 0.004)
    other.record(results(tracked: 1, pool: 9), 0.004)
    snapshots = [@metrics.snapshot, other.snapshot].map { |snapshot| JSON.parse(JSON.generate(snapshot)) }
    assert_equal 0, Ringpool::Dashboard.summarize(snapshots, [], @now)["series"].sum { |row| row["requests"] }

    document = Ringpool::Dashboard.summarize(snapshots, [{ "shard" => "a" }], @now + 1)
    row = document["series"].last
    assert_equal [@now, 3, 16], row.values_at("at", "requests", "allocations")
    assert_equal({ "exhausted" => 5, "shard_unavailable" => 0, "storage_unavailable" => 0 }, row["overflows"])
    assert_in_delta 4, row["p90_ms"], 1
    assert_in_delta 4, row["p50_ms"], 1, "the median of 2, 4 and 4 ms"
    current = document["current"]
    assert_equal [0.3, 1.6], current.values_at("requests_per_second", "allocations_per_second")
    assert_equal 0.5, current["overflows_per_second"]["exhausted"]
    assert_equal [{ "ring_pool" => 7, "allocations" => 10 }, { "ring_pool" => 9, "allocations" => 6 }], document["busiest_pools"]
    assert_equal [{ "shard" => "a" }], document["shards"]
  end
end
