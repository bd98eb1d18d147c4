# frozen_string_literal: true

require_relative "../test_helper"
require_relative "support/server_helpers"

# The stack demo app (examples/demo, run by examples/demo/run), served under Rack::Lint.
class ServerDemoTest < Minitest::Test
  include Weft::Test::ServerHelpers

  def test_demo_endpoints
    app = Rack::Builder.parse_file(File.expand_path("../../examples/demo/config.ru", __dir__))
    app = app.first if app.is_a?(Array)
    with_server(app, stats_path: "/stats") do |_, port|
      assert_match(/Weft demo/, http_get(port, "/").body)
      assert_match(/\Aslept 0.1 s/, http_get(port, "/sleep?seconds=0.1").body)
      fetched = nil
      assert_elapsed_under(2.5) { fetched = JSON.parse(http_get(port, "/fetch?count=4").body) }
      assert_equal ["200"] * 4, fetched["statuses"]
      assert_operator fetched["seconds"], :<, 2, "4 fetches of a 1 s URL did not overlap"
      assert_operator JSON.parse(http_get(port, "/stats").body)["totals"]["requests"], :>=, 7
    end
  end
end
