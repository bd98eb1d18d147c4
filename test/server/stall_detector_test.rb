# frozen_string_literal: true

require_relative "../test_helper"
require_relative "support/server_helpers"

# The reactor-stall detector: a request that computes without yielding is named in the log.
class ServerStallDetectorTest < Minitest::Test
  include Weft::Test::ServerHelpers

  SPIN = lambda do |env|
    case env["PATH_INFO"]
    when "/spin"
      finish = Weft::Timers.now + 1
      nil while Weft::Timers.now < finish # holds the reactor for 1 s
    when "/block"
      Fiber.new(blocking: true) { sleep 1 }.resume # the thread sleeps: the reactor does not see it
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

  # The line says how the reactor thread spent the stall (Linux's scheduler statistics): a
  # request that computes was on a core or waiting for one (a loaded machine) all along, one
  # that blocks the thread was on neither, whatever the load.
  def test_the_line_tells_a_thread_that_computed_from_one_that_was_blocked
    skip "no per-thread scheduler statistics here" unless File.exist?("/proc/thread-self/schedstat")
    log = capture_log do
      with_server(SPIN, stall_threshold: 0.3) do |server, port|
        assert_equal "ok", http_get(port, "/spin").body
        assert_equal "ok", http_get(port, "/block").body
        deadline = Weft::Timers.now + 3
        sleep 0.05 until server.reactor_stalls >= 2 || Weft::Timers.now > deadline
        sleep 0.2 # the second line is written once the reactor turns
      end
    end
    # (the blocking fiber has no request of its own: Thread#[] is a fiber's)
    account = Regexp.new(': (GET /spin|no request \\(server or background task\\)) held it for [\\d.]+s; no other ' \
                         'request.* Over ([\\d.]+)s of it the reactor thread ran ([\\d.]+)s, waited ([\\d.]+)s ' \
                         'for a core and was blocked ([\\d.]+)s: ([^.]+)\\.')
    accounts = log.lines.grep(/reactor stalled/).filter_map { |line| line.match(account)&.captures }
    assert_equal 2, accounts.size, log
    spin, block = accounts.sort_by(&:first) # /spin, then the blocking fiber
    span, ran, waited, blocked = spin[1, 4].map(&:to_f)
    assert_operator ran + waited, :>, span / 2, "a spinning thread is on a core or waits for one: #{spin.inspect}"
    assert_operator blocked, :<, span / 2, spin.inspect
    span, ran, waited, blocked = block[1, 4].map(&:to_f)
    assert_operator blocked, :>, span / 2, "a sleeping thread is neither: #{block.inspect}"
    assert_operator ran + waited, :<, span / 2, block.inspect
    assert_equal "mostly blocked (a system call or Ruby's lock), not computing", block.last
  end
end
