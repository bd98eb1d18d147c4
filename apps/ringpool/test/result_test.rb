# frozen_string_literal: true

require_relative "test_helper"

# Results as the public API writes them and as shards send them to each other, and the clock's
# ISO 8601 (written by hand for speed: it must say what Time#iso8601(6) says).
class RingpoolResultTest < Minitest::Test
  POOL = Ringpool::RingPool.new(id: 7, overflow_number: "+15550999999", lockout_seconds: 60)
  UNTIL = 1_714_565_000_123_456

  def results
    [Ringpool::Result.tracked(7, "+15550000001", UNTIL), Ringpool::Result.overflow(POOL, "exhausted"),
     Ringpool::Result.overflow(POOL, "storage_unavailable"), Ringpool::Result.error(7, "invalid_params", %(a "quoted" \\ message)),
     Ringpool::Result.not_owner(7)]
  end

  def test_the_public_json_of_each_kind
    assert_equal [
      { "ring_pool" => 7, "number" => "+15550000001", "overflow" => false, "lockout_until" => "2024-05-01T12:03:20.123456Z" },
      { "ring_pool" => 7, "number" => "+15550999999", "overflow" => true, "reason" => "exhausted", "lockout_until" => nil },
      { "ring_pool" => 7, "number" => "+15550999999", "overflow" => true, "reason" => "storage_unavailable", "lockout_until" => nil },
      { "ring_pool" => 7, "error" => "invalid_params", "message" => %(a "quoted" \\ message) },
      { "ring_pool" => 7, "not_owner" => true }
    ], results.map { |result| JSON.parse(result.to_json) }
  end

  def test_the_peer_shape_reads_back_as_the_same_result
    results.each do |result|
      sent = JSON.parse(JSON.generate([result.to_peer])).first
      back = Ringpool::Result.from_peer(sent, POOL)
      assert_equal [result.kind, result.ring_pool, result.number, result.reason, result.locked_until, result.message],
                   [back.kind, back.ring_pool, back.number, back.reason, back.locked_until, back.message]
    end
  end

  def test_a_malformed_peer_answer_reads_as_nothing
    [nil, 1, "nonsense", [UNTIL], [UNTIL, "not e164"], ["soon", "+15550000001"], [UNTIL, "+15550000001", 1], { "no" => "error" }].each do |value|
      assert_nil Ringpool::Result.from_peer(value, POOL), value.inspect
    end
  end

  def test_iso8601_matches_time_across_seconds_and_past_its_cache
    random = Random.new(3)
    values = [0, 999_999, 1_000_000, UNTIL, -1] + Array.new(6_000) { random.rand(0..4_102_444_800_000_000) }
    values.each do |microseconds|
      expected = Time.at(microseconds / 1_000_000, microseconds % 1_000_000, :usec).utc.iso8601(6)
      assert_equal expected, Ringpool::Clock.iso8601(microseconds)
    end
    assert_equal UNTIL, Ringpool::Clock.parse(Ringpool::Clock.iso8601(UNTIL))
  end
end
