# frozen_string_literal: true

require_relative "../test_helper"
require_relative "support/server_helpers"

# The reactor-stall detector: a request that computes without yielding is named in the log.
class ServerStallDetectorTest < Minitest::Test
  include Weft::Test::ServerHelpers

  SPIN = lambda do |env|
    if env["PATH_INFO"] == "/spin"
      finish = Weft::Timers.now + 1
      nil while Weft::Timers.now < finish # holds the reactor for 1 s
    end
    [200, {}, ["ok"]]
  end

  def test_a_request_holding_the_reactor_is_logged_once_with_its_duration_and_backtrace
    log = capture_log do
      with_server(SPIN, stall_threshold: 0.3, stats_path: "/stats") do |server, port|
        3.times { assert_equal "ok", http_get(port, "/quick").body }
        assert_equal "ok", http_get(port, "/spin?n=1").body
        deadline = Weft::Timers.now + 2
        sleep 0.05 until server.reactor_stalls.positive? || Weft::Timers.now > deadline
        sleep 0.5 # time for a second report, if there were one
        assert_equal 1, JSON.parse(http_get(port, "/stats").body)["totals"]["reactor_stalls"]
      end
    end
    lines = log.lines.grep(/reactor stalled/)
    assert_equal 1, lines.size, log # one for the stall, none for the quick requests
    duration = lines.first[%r{GET /spin\?n=1 held it for ([\d.]+)s; no other request}, 1]
    assert duration, lines.first
    assert_in_delta 1.0, duration.to_f, 0.25
    assert_match(/\n\t#{Regexp.escape(__FILE__)}:\d+/, log, "the backtrace shows where it was stuck")
  end
end
