# frozen_string_literal: true

require_relative "test_helper"
require_relative "support/process_cluster"
require_relative "support/browser"

# The dashboard in a real browser: headless Chromium loads GET / from a two-shard cluster, and
# the figures it renders come alive when allocation requests arrive.
class RingpoolDashboardTest < Minitest::Test
  include Ringpool::Test::Helpers

  def setup
    missing = Ringpool::Test::Browser.missing
    flunk(missing) if missing
    @cluster = Ringpool::Test::ProcessCluster.new(database_url: fresh_database, shards: 2).start
    @port = @cluster.port
  end

  def teardown
    @load&.kill
    @cluster&.stop
  end

  def test_the_page_shows_live_figures_from_every_shard
    pools = Array.new(4) { create_pool(@port, count: 3, lockout: 3600) }
    Ringpool::Test::Browser.open do |browser|
      browser.navigate.to("http://127.0.0.1:#{@port}/")
      wait_until(15, "two shards answering in the table") do
        browser.find_elements(css: "#shards tr").size == 2 &&
          browser.find_elements(css: "#shards tr td:nth-child(2)").map(&:text) == %w[ok ok]
      end
      assert_equal "0.0", text(browser, "allocations-rate"), "no allocations yet"
      assert_equal "–", text(browser, "p90")

      # 10 items a request: 12 pool numbers and then, every pool exhausted, overflow numbers.
      @load = Thread.new do
        loop do
          allocate(@port, Array.new(10) { |i| { "ring_pool" => pools[i % pools.size]["id"] } })
          sleep 0.05
        end
      end
      wait_until(20, "allocations and overflows per second shown") do
        text(browser, "allocations-rate").to_f.positive? && text(browser, "overflow-exhausted").to_f.positive?
      end
      assert_match(/\A\d+(\.\d)? ms\z/, text(browser, "p90"))
      busiest = browser.find_elements(css: "#pools tr td:first-child").map(&:text)
      assert_equal pools.map { |pool| "##{pool['id']}" }.sort, busiest.sort
      breakers = browser.find_elements(css: "#shards .pill").map(&:text)
      assert(breakers.any? { |pill| pill.match?(/shard-\d: closed/) }, "a peer's breaker shown: #{breakers.inspect}")

      # The figures keep changing while the load runs: the page refreshes itself.
      before = browser.find_element(tag_name: "body").attribute("data-refreshes").to_i
      wait_until(10, "two more refreshes") { browser.find_element(tag_name: "body").attribute("data-refreshes").to_i >= before + 2 }
      chart = browser.execute_script(<<~JS)
        const canvas = document.getElementById("rate-chart");
        const pixels = canvas.getContext("2d").getImageData(0, 0, canvas.width, canvas.height).data;
        let painted = 0;
        for (let i = 3; i < pixels.length; i += 4) if (pixels[i] > 0) painted++;
        return painted;
      JS
      assert_operator chart, :>, 1_000, "the allocation chart has bars"
      if (path = ENV["RINGPOOL_SCREENSHOT"])
        browser.save_screenshot(path)
      end
    end
  end

  # The JSON behind the page, as documented: every shard's figures summed.
  def test_dashboard_json_sums_every_shard
    pool = create_pool(@port, count: 50, lockout: 3600)
    20.times { allocate(@port, Array.new(5) { { "ring_pool" => pool["id"] } }) }
    document = wait_until(10, "a full second counted") do
      body = api(@port, :get, "/dashboard.json").last
      body if body["series"].sum { |row| row["requests"] } == 20
    end
    assert_equal Ringpool::Metrics::WINDOW, document["series"].size
    assert_equal 100, document["series"].sum { |row| row["allocations"] }
    assert_equal 50, document["series"].sum { |row| row["overflows"]["exhausted"] }
    assert_equal [{ "ring_pool" => pool["id"], "allocations" => 100 }], document["busiest_pools"]
    assert_equal 2, document["shards"].size
    assert(document["shards"].all? { |shard| shard["status"] == "ok" })
    assert_equal 1, document["shards"].sum { |shard| shard["owned_pools"] }
  end

  # Each dashboard document asks every peer for its report: requests that come together share
  # one document. 40 at once made 40 peer calls before (with 2 shards: one each); now a
  # handful, however the kernel spreads the connections over the two shards.
  def test_dashboard_requests_at_once_share_the_peer_calls
    wait_until(10, "both shards on the dashboard") { api(@port, :get, "/dashboard.json").last["shards"].size == 2 }
    sleep Ringpool::Shard::DASHBOARD_TTL + 0.1 # the documents made while waiting are stale
    before = peer_requests
    Array.new(40) { Thread.new { api(@port, :get, "/dashboard.json") } }.map(&:value).each do |status, body|
      assert_equal 200, status
      assert_equal 2, body["shards"].size
    end
    made = peer_requests - before
    assert_operator made, :>=, 1
    assert_operator made, :<=, 12, "40 dashboard requests at once made #{made} peer calls"
  end

  private

  # Calls every shard made to its peers so far (their /health, on each shard's own socket).
  def peer_requests
    Array.new(2) { |index| @cluster.shard_health(index) }.sum do |health|
      health.fetch("peers").values.sum { |peer| peer.fetch("requests") }
    end
  end

  def text(browser, id)
    browser.find_element(id: id).text
  end
end
