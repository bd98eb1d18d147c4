# frozen_string_literal: true

require_relative "../test_helper"
require_relative "support"
require "weft/http"
require "weft/resilience"

# Weft::HTTP::Client's `breaker:` option: an origin that keeps failing stops being contacted,
# answers come back gradually, and one origin's trouble never closes the door to another.
class HTTPClientBreakerTest < Minitest::Test
  include Weft::Test::HTTPFixtures

  # Opens after 4 failures in the last 4 calls; ramps straight to all calls after 0.2 s.
  FAST = { window_calls: 4, minimum_calls: 4, open_for: 0.2, ramp: [0.5, 1.0], ramp_for: 0.4, ramp_minimum_calls: 2 }.freeze

  # The breakers made per origin live in the process's registry: drop this test's, so that a
  # later test whose server happens to get the same port starts with a closed breaker.
  def teardown
    (Weft::CircuitBreaker.all.map(&:name) - @registered).each do |name|
      Weft::CircuitBreaker.unregister(name) if name.start_with?("http ")
    end
    super
  end

  def setup
    super
    @registered = Weft::CircuitBreaker.all.map(&:name)
  end

  def flaky_server
    state = { failing: true }
    srv = server { |_request| state[:failing] ? [503, {}, "down"] : [200, {}, "up"] }
    [srv, state]
  end

  def test_5xx_answers_open_the_breaker_and_no_request_is_sent_while_it_is_open
    srv, state = flaky_server
    http = client(srv.url, breaker: FAST)
    # Counted as failures, yet handed to the caller like any response.
    assert_equal [503] * 4, Array.new(4) { http.get("/").status }
    error = assert_raises(Weft::CircuitOpen) { http.get("/") }
    assert_match(/http #{Regexp.escape(srv.url.chomp('/'))}/, error.message)
    assert_equal 4, srv.requests.size, "a request reached the origin while its breaker was open"

    state[:failing] = false
    sleep 0.25 # open_for passed: the ramp admits half the calls, then all
    answers = Array.new(6) do
      http.get("/").status
    rescue Weft::CircuitOpen
      :refused
    end
    assert_includes answers, 200
    assert_includes answers, :refused, "the ramp let every call through at once"
    sleep 0.45
    assert_equal [200] * 5, Array.new(5) { http.get("/").status }, "the breaker did not close after the ramp"
  end

  def test_connection_errors_open_the_breaker_and_then_requests_fail_at_once_without_connecting
    srv = server(raw: true) { |socket, _id| socket.close } # accepts, then hangs up before answering
    http = client(srv.url, breaker: FAST)
    4.times { assert_raises(Weft::HTTP::ConnectionError) { http.get("/") } }
    error, seconds = timed { http.get("/") }
    assert_kind_of Weft::CircuitOpen, error
    assert_operator seconds, :<, 0.05
    assert_equal 4, srv.connections, "a connection was opened while the breaker was open"
  end

  def test_refused_connections_count_too
    http = client("http://127.0.0.1:#{free_tcp_port}", breaker: FAST) # nothing listens there
    4.times { assert_raises(Weft::HTTP::ConnectionRefused) { http.get("/") } }
    assert_raises(Weft::CircuitOpen) { http.get("/") }
  end

  def test_each_origin_has_its_own_breaker_shared_by_every_client_of_the_process
    bad, = flaky_server
    good = server { |_request| [200, {}, "fine"] }
    http = client(breaker: FAST)
    4.times { http.get(bad.url) }
    assert_raises(Weft::CircuitOpen) { http.get(bad.url) }
    assert_equal "fine", http.get(good.url).body
    # Another client in the same process finds the failing origin's breaker open too.
    assert_raises(Weft::CircuitOpen) { client(breaker: true).get(bad.url) }
    assert_equal 4, bad.requests.size
  end

  def test_a_breaker_given_guards_every_origin_and_a_deadline_counts_as_a_failure
    slow = server { |_request| sleep 1; [200, {}, "late"] }
    breaker = Weft::CircuitBreaker.new("test #{name}", register: false, **FAST)
    http = client(slow.url, breaker: breaker)
    4.times { assert_raises(Weft::DeadlineExceeded) { http.get("/", deadline: 0.05) } }
    assert_equal :open, breaker.state
    assert_equal [4, 4], breaker.statistics.values_at(:calls, :failures)
  end

  # Work that outlived the caller's deadline, then asks the origin: the request fails without
  # connecting (nothing reached the origin), which says nothing about the origin.
  def test_a_request_begun_past_the_callers_deadline_is_not_held_against_the_origin
    srv = server { |_request| [200, {}, "ok"] }
    http = client(srv.url, breaker: FAST)
    Weft.run do
      Weft.deadline(0.02) do
        begin
          sleep 1
        rescue Weft::DeadlineExceeded
          nil
        end
        4.times { assert_raises(Weft::HTTP::DeadlineExceeded) { http.get("/") } }
      end
    end
    assert_equal 0, srv.connections
    assert_equal [:closed, 0, 4], http_breaker(srv).statistics.values_at(:state, :failures, :starved)
    assert_equal "ok", http.get("/").body
  end

  def test_a_cancelled_request_is_not_counted
    srv = server { |_request| sleep 1; [200, {}, "late"] }
    breaker = Weft::CircuitBreaker.new("test #{name}", register: false, **FAST)
    http = client(srv.url, breaker: breaker)
    Weft.run do
      requests = Array.new(4) { Weft.spawn { http.get("/") } }
      sleep 0.1 # every request is waiting for its answer
      requests.each(&:cancel)
      requests.each { |task| assert_nil task.wait }
      assert requests.all?(&:cancelled?)
    end
    assert_equal :closed, breaker.state
    assert_equal [4, 0, 4], breaker.statistics.values_at(:calls, :failures, :ignored)
    assert_equal 4, srv.connections
  end

  def test_which_errors_count_is_configurable
    srv = server { |_request| sleep 0.5; [200, {}, "late"] }
    http = client(srv.url, breaker: FAST.merge(failure: [Weft::HTTP::ConnectionError]))
    4.times { assert_raises(Weft::HTTP::ReadTimeout) { http.get("/", read_timeout: 0.05) } }
    assert_equal [0, 4], http_breaker(srv).statistics.values_at(:failures, :ignored)
    assert_equal "late", http.get("/").body, "timeouts opened a breaker that counts connection errors only"
  end

  # The caller's own mistakes (a streamed body shorter than the Content-Length it gave, a body
  # that fails to read) are not the origin's failures: counted, they would close it to every
  # other caller. A breaker made per origin counts the client's errors (Weft::HTTP::Error).
  def test_the_callers_errors_do_not_count_against_the_origin
    srv = server { |_request| [200, {}, "ok"] }
    http = client(srv.url, breaker: FAST)
    broken = Object.new
    def broken.read(*) = raise(IOError, "closed stream")
    4.times do
      assert_raises(ArgumentError) { http.post("/", body: %w[abc].each, headers: { "content-length" => "10" }) }
      assert_raises(IOError) { http.post("/", body: broken) }
    end
    assert_equal [:closed, 0, 8], http_breaker(srv).statistics.values_at(:state, :failures, :ignored)
    assert_equal "ok", http.get("/").body
  end

  # A timeout of the caller's own around the request still counts, as every timeout does.
  def test_a_timeout_around_the_request_counts
    srv = server { |_request| sleep 1; [200, {}, "late"] }
    http = client(srv.url, breaker: FAST)
    Weft.run { 4.times { assert_raises(Weft::TimeoutError) { Weft.timeout(0.05) { http.get("/") } } } }
    assert_equal [:open, 4], http_breaker(srv).statistics.values_at(:state, :failures)
  end

  def test_failed_statuses_are_configurable
    srv = server { |_request| [404, {}, "no"] }
    http = client(srv.url, breaker: FAST.merge(failed_statuses: [404]))
    4.times { http.get("/") }
    assert_raises(Weft::CircuitOpen) { http.get("/") }
  end

  # A server whose /hold requests are answered once go[:released] (or after 3 s), so that a
  # request holds its bulkhead slot meanwhile; other paths answer at once.
  def holding_server(go)
    server do |request|
      if request.path == "/hold"
        held_since = Process.clock_gettime(Process::CLOCK_MONOTONIC)
        sleep 0.01 until go[:released] || Process.clock_gettime(Process::CLOCK_MONOTONIC) - held_since > 3
      end
      [200, {}, "ok"]
    end
  end

  # The request's own `deadline:` starts before the breaker, so it bounds the breaker's guards
  # too: a bulkhead slot that does not free up in time is refused by the deadline (a
  # Weft::BulkheadFull, nothing sent), not waited for until the slot frees up and then failed
  # at once with DeadlineExceeded.
  def test_a_bulkhead_wait_inside_the_breaker_ends_by_the_requests_deadline
    go = { released: false }
    srv = holding_server(go)
    bulkhead = Weft::Bulkhead.new(limit: 1, queue: 4) # no timeout of its own
    breaker = Weft::CircuitBreaker.new("test #{name}", register: false, bulkhead: bulkhead)
    http = client(srv.url, breaker: breaker)
    Weft.run do
      holder = Weft.spawn { http.get("/hold").body }
      sleep 0.01 until srv.requests.size == 1 # the holder has the slot and its request is out
      error, seconds = timed { http.get("/", deadline: 0.1) }
      go[:released] = true
      assert_kind_of Weft::BulkheadFull, error
      assert_operator seconds, :>=, 0.09, "refused before the deadline: the slot could have freed up"
      assert_operator seconds, :<, 0.1 + 1.0, "the bulkhead held the request past its deadline"
      assert_equal "ok", holder.wait
    end
    assert_equal 1, srv.requests.size
    assert_equal [0, 1], breaker.statistics.values_at(:failures, :rejected)
  end

  # Under the caller's Weft.deadline the same wait ends by that deadline, as the client's own
  # DeadlineExceeded (a Weft::HTTP::Error, naming the wait), like every other wait of a request.
  def test_a_bulkhead_wait_inside_the_breaker_ends_by_the_callers_deadline_as_the_clients_error
    go = { released: false }
    srv = holding_server(go)
    breaker = Weft::CircuitBreaker.new("test #{name}", register: false, bulkhead: Weft::Bulkhead.new(limit: 1, queue: 4))
    http = client(srv.url, breaker: breaker)
    Weft.run do
      holder = Weft.spawn { http.get("/hold").body }
      sleep 0.01 until srv.requests.size == 1
      error, seconds = timed { Weft.deadline(0.1) { http.get("/") } }
      go[:released] = true
      assert_kind_of Weft::HTTP::DeadlineExceeded, error
      assert_match(/caller's Weft.deadline.*rate limit or bulkhead/, error.message)
      assert_operator seconds, :<, 0.1 + 1.0, "the bulkhead held the request past the caller's deadline"
      assert_equal "ok", holder.wait
    end
    assert_equal 1, srv.requests.size
    assert_equal 0, breaker.statistics[:failures]
  end

  # A rate limiter inside the breaker that would make a request wait past its own `deadline:`
  # refuses it at once (Weft::RateLimited), as it does for the caller's Weft.deadline.
  def test_a_rate_limit_wait_past_the_requests_deadline_is_refused_at_once
    srv = server { |_request| [200, {}, "ok"] }
    limiter = Weft::RateLimiter.new(rate: 1, burst: 1, timeout: nil) # waits as long as it takes
    breaker = Weft::CircuitBreaker.new("test #{name}", register: false, rate_limit: limiter)
    http = client(srv.url, breaker: breaker)
    assert_equal "ok", http.get("/").body # the one token
    error, seconds = timed { http.get("/", deadline: 0.1) }
    assert_kind_of Weft::RateLimited, error
    assert_operator seconds, :<, 0.05, "waited for a token due after the request's deadline"
    assert_equal 1, srv.requests.size
    assert_in_delta 0.0, limiter.available, 0.1, "the refused request kept a reserved token"
  end

  # A breaker dropped from the registry (CircuitBreaker.unregister) is dropped by the clients
  # that used it: their next request goes through the breaker the registry now has, made anew,
  # and the old one is no longer kept alive by them.
  def test_an_unregistered_origin_breaker_is_not_used_any_more
    srv = server { |_request| [503, {}, "down"] }
    http = client(srv.url, breaker: FAST)
    3.times { http.get("/") }
    old = http_breaker(srv)
    assert_equal 3, old.statistics[:failures]
    Weft::CircuitBreaker.unregister(old.name)
    http.get("/")
    fresh = http_breaker(srv)
    refute_nil fresh, "the client went on with the unregistered breaker and made none anew"
    refute_same old, fresh
    assert_equal [1, 1], fresh.statistics.values_at(:calls, :failures)
    assert_equal 3, old.statistics[:calls], "a request went through the unregistered breaker"
  end

  # A breaker registered under an origin's name replaces the one made for it, for every client.
  def test_a_breaker_registered_under_the_origins_name_replaces_the_one_in_use
    srv = server { |_request| [200, {}, "ok"] }
    http = client(srv.url, breaker: FAST)
    http.get("/")
    old = http_breaker(srv)
    mine = Weft::CircuitBreaker.new(old.name, **FAST)
    http.get("/")
    assert_same mine, http_breaker(srv)
    assert_equal [1, 1], [old.statistics[:calls], mine.statistics[:calls]]
  end

  def http_breaker(srv)
    Weft::CircuitBreaker["http #{srv.url.chomp('/')}"]
  end

  def test_invalid_breaker_settings_are_rejected_at_construction
    { :yes => /breaker must be/, 3 => /breaker must be/, { failure_rate: 2 } => /failure_rate/,
      { failed_statuses: 5 } => /failed_statuses/, { nonsense: 1 } => /nonsense/ }.each do |setting, message|
      error = assert_raises(ArgumentError, setting.inspect) { Weft::HTTP::Client.new("http://127.0.0.1:1", breaker: setting) }
      assert_match message, error.message
    end
  end
end
