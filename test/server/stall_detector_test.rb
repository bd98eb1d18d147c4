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
      # The thread sleeps, and the reactor does not see it. (The fiber names the request, as
      # the server's fiber does: Thread#[] is a fiber's own.)
      request = Thread.current[Weft::Server::StallDetector::REQUEST]
      Fiber.new(blocking: true) do
        Thread.current[Weft::Server::StallDetector::REQUEST] = request
        sleep 1
      end.resume
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

  # The line says how the reactor thread spent the stall (Linux's scheduler statistics, read by
  # the ticker with each pulse): a request that computes was on a core or waiting for one (a
  # loaded machine) all along, one that blocks the thread was on neither, whatever the load.
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
    account = /Over the ([\d.]+)s between its pulses the reactor thread ran ([\d.]+)s, waited ([\d.]+)s for a core and was blocked ([\d.]+)s: ([^.]+)\./
    figures = %w[spin block].to_h do |path|
      line = log.lines.grep(/reactor stalled/).find { |candidate| candidate.include?("GET /#{path} held it") }
      assert line, "no stall was logged for /#{path}:\n#{log}"
      captures = line[account] && $~.captures
      assert captures, line
      [path, captures[0, 4].map(&:to_f) << captures[4]]
    end
    span, ran, waited, blocked, = figures["spin"]
    assert_operator ran + waited, :>, span / 2, "a spinning thread is on a core or waits for one: #{figures.inspect}"
    assert_operator blocked, :<, span / 2, figures.inspect
    span, ran, waited, blocked, cause = figures["block"]
    assert_operator blocked, :>, span / 2, "a sleeping thread is neither: #{figures.inspect}"
    assert_operator ran + waited, :<, span / 2, figures.inspect
    assert_equal "mostly blocked (a system call or Ruby's lock), not computing", cause
  end
end
