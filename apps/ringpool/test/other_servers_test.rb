# frozen_string_literal: true

require_relative "test_helper"
require_relative "support/process_cluster"

# The same app under Puma and under Falcon (config/puma.rb, config/any_server.ru): each worker
# claims a shard index of its own and runs its shard in a Weft reactor thread, and the cluster
# behaves as under `weft serve` — pools shared out, any worker answers for every pool, requests
# overlap, the dashboard sees every shard.
class RingpoolOtherServersTest < Minitest::Test
  include Ringpool::Test::Helpers

  def teardown
    @cluster&.stop
  end

  def test_under_puma
    check_cluster(:puma)
  end

  def test_under_falcon
    check_cluster(:falcon)
  end

  private

  def check_cluster(server)
    @cluster = Ringpool::Test::ProcessCluster.new(database_url: fresh_database, shards: 2, server: server).start
    port = @cluster.port
    pools = Array.new(4) { create_pool(port, count: 50, lockout: 3600) }
    owners = wait_until(15, "pools spread over both shards") do
      owners = pools.map { |pool| api(port, :get, "/ring_pools/#{pool['id']}").last["owner"] }
      owners.none?(&:nil?) && owners.tally.values.sort == [2, 2] && owners
    end
    assert_equal [@cluster.shard_url(0), @cluster.shard_url(1)].sort, owners.uniq.sort

    # 20 requests at once, each for all four pools: every item tracked, no number twice.
    started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    answers = Array.new(20) do |round|
      Thread.new { allocate(port, pools.map { |pool| { "ring_pool" => pool["id"], "params" => { "round" => round } } }) }
    end.flat_map(&:value)
    elapsed = Process.clock_gettime(Process::CLOCK_MONOTONIC) - started
    assert(answers.all? { |answer| answer["overflow"] == false }, answers.reject { |answer| answer["overflow"] == false }.inspect)
    assert_equal 80, answers.map { |answer| answer["number"] }.uniq.size
    assert_operator elapsed, :<, 10, "#{server}: 20 concurrent requests"

    # The current second is left out of the series: wait for it to end.
    document = wait_until(5, "the requests counted") do
      body = api(port, :get, "/dashboard.json").last
      body if body["series"].sum { |row| row["requests"] } == 20
    end
    assert_equal %w[ok ok], document["shards"].map { |shard| shard["status"] }
  rescue StandardError => e
    raise e.class, "#{e.message}\n#{server} log:\n#{@cluster&.log_tail}"
  end
end
