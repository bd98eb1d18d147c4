# frozen_string_literal: true

require_relative "test_helper"

# FanOut: every peer at once, under the caller's deadline; whatever goes wrong with a peer
# costs only its own items, which get their pools' overflow numbers.
class RingpoolFanOutTest < Minitest::Test
  include Ringpool::Test::Helpers

  POOL = Ringpool::RingPool.new(id: 7, overflow_number: "+15550999999", lockout_seconds: 60)

  # Fake peers, each on a unix socket of its own: one answers properly, the others misbehave.
  PEERS = {
    "good" => lambda do |env|
      count = JSON.parse(env["rack.input"].read)["items"].size
      until_at = Ringpool::Clock.iso8601(Ringpool::Clock.now + 60_000_000)
      results = Array.new(count) { |i| { "ring_pool" => 7, "number" => "+1555000000#{i}", "overflow" => false, "lockout_until" => until_at } }
      [200, { "content-type" => "application/json" }, [JSON.generate({ "results" => results })]]
    end,
    "slow" => ->(_env) { sleep 5 },
    "garbage" => ->(_env) { [200, {}, ["not json"]] },
    "short" => ->(_env) { [200, {}, ['{"results": []}']] },
    "error" => ->(_env) { [500, {}, ["boom"]] },
    "other_pool" => ->(_env) { [200, {}, ['{"results": [{"ring_pool": 8, "error": "x"}, {"ring_pool": 8, "error": "x"}]}']] }
  }.freeze

  # Yields peer name => URL (plus "gone": a socket nobody listens on).
  def with_peers
    Dir.mktmpdir do |dir|
      servers = PEERS.map { |name, app| Weft::Server.new(app, binds: ["unix://#{dir}/#{name}.sock"], shutdown_timeout: 1) }
      threads = servers.map { |server| Thread.new { server.run } }
      yield(PEERS.keys.to_h { |name| [name, "unix://#{dir}/#{name}.sock"] }.merge("gone" => "unix://#{dir}/gone.sock"))
    ensure
      servers&.each(&:stop)
      threads&.each { |thread| thread.join(5) }
    end
  end

  def items(count)
    Array.new(count) { Ringpool::Allocator::Item.new(POOL, "{}") }
  end

  def test_each_peer_costs_only_its_own_items
    with_peers do |urls|
      fan_out = Ringpool::FanOut.new
      answers = Weft.run do
        assert_elapsed_under(1.5, "the slow peer held everyone up") do
          Weft.deadline(0.3) { fan_out.call(urls.values.to_h { |url| [url, items(2)] }) }
        end
      end
      assert_equal [["+15550000000", false], ["+15550000001", false]], answers[urls["good"]].map { |a| [a.number, a.overflow?] }
      (urls.keys - ["good"]).each do |name|
        assert_equal [["+15550999999", "shard_unavailable"]] * 2, answers[urls[name]].map { |a| [a.number, a.reason] }, name
      end
    ensure
      fan_out&.close
    end
  end

  def test_connections_are_kept_alive
    with_peers do |urls|
      fan_out = Ringpool::FanOut.new
      Weft.run { 5.times { Weft.deadline(2) { fan_out.call({ urls["good"] => items(3) }) } } }
      assert_equal({ urls["good"] => { "connections_opened" => 1, "requests" => 5 } }, fan_out.statistics)
    ensure
      fan_out&.close
    end
  end
end
