# frozen_string_literal: true

require_relative "../test_helper"
require_relative "../server/support/server_helpers"
require "weft/resilience"
require "json"
require "open3"

class ResilienceServerStatisticsTest < Minitest::Test
  include Weft::Test::ServerHelpers

  def test_stats_and_metrics_list_the_circuit_breakers
    name = "shard \"3\" #{object_id}"
    breaker = Weft::CircuitBreaker.new(name, window_calls: 2, minimum_calls: 2, open_for: 30)
    2.times { breaker.call(fallback: ->(_) {}) { raise IOError } }
    breaker.call(fallback: ->(_) {}) { flunk "ran while open" }

    with_server(->(_env) { [200, {}, ["x"]] }, stats_path: "/stats", metrics_path: "/metrics") do |_, port|
      listed = JSON.parse(http_get(port, "/stats").body)["workers"].first["circuit_breakers"]
      mine = listed.find { |entry| entry["name"] == name }
      assert_equal({ "state" => "open", "calls" => 3, "failures" => 2, "starved" => 0, "rejected" => 1, "opened" => 1,
                     "admitted_fraction" => 0.0 },
                   mine.slice("state", "calls", "failures", "starved", "rejected", "opened", "admitted_fraction"))

      metrics = http_get(port, "/metrics").body
      labels = %(worker="",pid="#{Process.pid}",breaker="shard \\"3\\" #{object_id}")
      assert_includes metrics, "# TYPE weft_circuit_breaker_state gauge\n"
      assert_includes metrics, "weft_circuit_breaker_state{#{labels},state=\"open\"} 1\n"
      assert_includes metrics, "weft_circuit_breaker_state{#{labels},state=\"closed\"} 0\n"
      assert_includes metrics, "# TYPE weft_circuit_breaker_rejected_total counter\n"
      assert_includes metrics, "weft_circuit_breaker_rejected_total{#{labels}} 1\n"
      assert_includes metrics, "weft_circuit_breaker_failures_total{#{labels}} 2\n"
      assert_includes metrics, "weft_circuit_breaker_opened_total{#{labels}} 1\n"
      assert_includes metrics, "weft_circuit_breaker_starved_total{#{labels}} 0\n"
    end
  end

  # The server must neither load weft/resilience nor mention breakers without it; a separate
  # process, since this one has loaded it.
  def test_the_server_alone_reports_no_breakers
    root = File.expand_path("../..", __dir__)
    script = <<~RUBY
      require "weft/server"
      stats = Weft::Server::Statistics.new(Weft::Server.new(->(_) { [200, {}, []] }, binds: ["tcp://127.0.0.1:0"], workers: 0))
      print [defined?(Weft::CircuitBreaker).inspect, stats.snapshot.key?(:circuit_breakers), stats.to_prometheus.include?("circuit_breaker")].inspect
    RUBY
    out, err, status = Open3.capture3(RbConfig.ruby, "-I", File.join(root, "lib"), "-e", script, chdir: root)
    assert status.success?, err
    assert_equal '["nil", false, false]', out
  end
end
