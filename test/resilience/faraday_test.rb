# frozen_string_literal: true

require_relative "../test_helper"
require_relative "../http/support"
require "weft/http/faraday"
require "weft/resilience/faraday"

class ResilienceFaradayTest < Minitest::Test
  include Weft::Test::HTTPFixtures

  # Opens after 4 failures among the last 4 calls, stays open long enough for a test to look.
  BREAKER = { window_calls: 4, minimum_calls: 4, failure_rate: 1.0, open_for: 5 }.freeze

  def faraday(url, adapter: :weft, **middleware)
    Faraday.new(url) do |f|
      f.request :weft_breaker, **middleware
      f.adapter adapter
    end
  end

  def test_a_failing_origin_opens_its_breaker_and_later_requests_do_no_io
    srv = server { [503, { "content-type" => "text/plain" }, "down"] }
    conn = faraday(srv.url, **BREAKER)
    4.times { assert_equal 503, conn.get("/").status } # 5xx reach the caller, and count
    requests = srv.requests.size
    error = assert_raises(Weft::CircuitOpen) { conn.get("/") }
    assert_equal srv.requests.size, requests, "no request reached the server while open"
    assert_equal "faraday http://127.0.0.1:#{URI(srv.url).port}", error.breaker
    assert_equal :open, Weft::CircuitBreaker[error.breaker].state
  end

  def test_connections_to_one_origin_share_its_breaker
    srv = server { [502, {}, "bad gateway"] }
    4.times { faraday(srv.url, **BREAKER).get("/") }
    assert_raises(Weft::CircuitOpen) { faraday(srv.url, **BREAKER).get("/") }
  end

  def test_adapter_errors_count_and_propagate_as_faraday_errors
    port = free_tcp_port
    conn = faraday("http://127.0.0.1:#{port}", **BREAKER)
    4.times { assert_raises(Faraday::ConnectionFailed) { conn.get("/") } }
    assert_raises(Weft::CircuitOpen) { conn.get("/") }
  end

  def test_successes_keep_it_closed_and_each_origin_has_its_own_breaker
    good = server { [200, {}, "ok"] }
    bad = server { [500, {}, "no"] }
    good_conn = faraday(good.url, **BREAKER)
    bad_conn = faraday(bad.url, **BREAKER)
    4.times { bad_conn.get("/") }
    10.times { assert_equal "ok", good_conn.get("/").body }
    assert_raises(Weft::CircuitOpen) { bad_conn.get("/") }
  end

  def test_a_breaker_of_the_callers_own_with_a_fallback_and_any_adapter
    srv = server { [500, {}, "no"] }
    breaker = Weft::CircuitBreaker.new("faraday test shared", register: false, **BREAKER)
    conn = faraday(srv.url, adapter: :net_http, breaker: breaker, fallback: ->(error) { error.class })
    4.times { assert_equal 500, conn.get("/").status }
    assert_equal Weft::CircuitOpen, conn.get("/")
    assert_equal :open, breaker.state
  end

  def test_statuses_that_count_are_configurable
    srv = server { [404, {}, "missing"] }
    conn = faraday(srv.url, failed_statuses: [404], **BREAKER)
    4.times { assert_equal 404, conn.get("/").status }
    assert_raises(Weft::CircuitOpen) { conn.get("/") }
  end

  def test_overlapping_requests_inside_a_reactor
    srv = server { sleep 0.3; [200, {}, "ok"] }
    conn = faraday(srv.url, **BREAKER)
    bodies = assert_elapsed_under(2) { Weft.run { Weft.map(1..5) { conn.get("/").body } } }
    assert_equal ["ok"] * 5, bodies
  end

  def test_invalid_options_fail_when_the_connection_is_built
    [{ breaker: Object.new }, { failed_statuses: 5 }, { fallback: 1 }, { failure_rate: 2 },
     { breaker: Weft::CircuitBreaker.new("x", register: false), slow_call: 1 }].each do |options|
      assert_raises(ArgumentError, options.inspect) { faraday("http://127.0.0.1:1", **options).get("/") }
    end
  end
end
