# frozen_string_literal: true

require_relative "../test_helper"
require_relative "support"
require "weft/http"

# The caller's deadline (Weft.deadline, inherited by spawned tasks) bounds every wait of a
# request, ends it with an error that says which limit fired, and never leaves a half-read
# connection in the pool.
class HTTPClientDeadlineTest < Minitest::Test
  include Weft::Test::HTTPFixtures

  # How late after the deadline a request may end. The requests wait for sockets, so they end
  # within milliseconds; the margin is for a loaded shared machine.
  SLACK = 0.05

  def now
    Weft::Timers.now
  end

  # /slow answers after 2 s, anything else at once with its own path.
  def slow_server
    server { |request| sleep 2 if request.path == "/slow"; [200, {}, "answer to #{request.path}"] }
  end

  def test_a_deadline_set_at_the_top_ends_a_request_in_a_spawned_task
    srv = slow_server
    http = client(srv.url, read_timeout: 10)
    inner = outer = elapsed = nil
    Weft.run do
      started = now
      begin
        Weft.deadline(0.2) do
          Weft.spawn do
            http.get("/slow")
          rescue Exception => e # rubocop:disable Lint/RescueException
            inner = e
            raise
          end.wait
        end
      rescue Weft::DeadlineExceeded => e
        outer = e
      end
      elapsed = now - started
      # The connection that was waiting was retired, not pooled: the next request gets its own
      # answer at once instead of the late answer to /slow.
      assert_equal "answer to /fast", assert_elapsed_under(1) { http.get("/fast").body }
    end
    assert_operator elapsed, :<, 0.2 + SLACK, "the request outlived the deadline"
    assert_kind_of Weft::DeadlineExceeded, outer
    assert_instance_of Weft::HTTP::DeadlineExceeded, inner
    assert_match(/deadline of 0\.2s .*Weft\.deadline.*response head/, inner.message)
    stats = http.statistics.fetch(srv.url)
    assert_equal 1, stats[:discarded]
    assert_equal 2, srv.connections
  end

  def test_a_deadline_outside_a_reactor_bounds_the_request_in_a_plain_thread
    srv = slow_server
    http = client(srv.url, read_timeout: 10)
    error, elapsed = Thread.new do
      started = now
      begin
        Weft.deadline(0.2) { http.get("/slow") }
      rescue Exception => e # rubocop:disable Lint/RescueException
        [e, now - started]
      end
    end.value
    assert_operator elapsed, :<, 0.2 + SLACK, "the request outlived the deadline"
    assert_kind_of Weft::DeadlineExceeded, error
    assert_kind_of Weft::HTTP::Error, error
    assert_match(/Weft\.deadline.*response head/, error.message)
    assert_equal 1, http.statistics.fetch(srv.url)[:discarded]
    # Timeout's raise did not leave the half-read connection in the pool: the next request gets
    # its own answer, on a new connection.
    assert_equal "answer to /fast", assert_elapsed_under(1) { http.get("/fast").body }
    assert_equal 2, srv.connections
  end

  def test_the_shorter_limit_fires_and_the_error_says_which
    srv = slow_server
    Weft.run do
      ambient = assert_raises(Weft::HTTP::DeadlineExceeded) do
        Weft.deadline(0.2) { client(srv.url, read_timeout: 5).get("/slow") }
      end
      assert_match(/Weft\.deadline/, ambient.message)

      read = assert_raises(Weft::HTTP::ReadTimeout) do
        Weft.deadline(5) { client(srv.url, read_timeout: 0.2).get("/slow") }
      end
      assert_match(/read timeout of 0\.2s/, read.message)

      own = assert_raises(Weft::HTTP::DeadlineExceeded) do
        Weft.deadline(5) { client(srv.url).get("/slow", deadline: 0.2) }
      end
      assert_match(/request deadline of 0\.2s/, own.message)
      refute_match(/Weft\.deadline/, own.message)
    end
  end

  def test_the_deadline_error_is_rescued_as_every_family_it_belongs_to
    srv = slow_server
    error = assert_raises(Weft::HTTP::DeadlineExceeded) { client(srv.url).get("/slow", deadline: 0.1) }
    [Weft::DeadlineExceeded, Weft::TimeoutError, Timeout::Error, Weft::HTTP::Error,
     Weft::HTTP::TimeoutError].each { |family| assert_kind_of family, error }
  end

  def test_a_deadline_arriving_mid_body_retires_the_connection
    srv = server(raw: true) do |socket|
      socket.readpartial(65_536)
      socket.write("HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nfirst ten!")
      sleep 2
    end
    http = client(srv.url, read_timeout: 10)
    chunks = []
    Weft.run do
      error = assert_elapsed_under(0.2 + SLACK + 0.1) do
        assert_raises(Weft::DeadlineExceeded) do
          Weft.deadline(0.2) { http.get("/") { |response| response.each_chunk { |chunk| chunks << chunk } } }
        end
      end
      assert_kind_of Weft::HTTP::Error, error
      assert_match(/response body/, error.message)
    end
    assert_equal ["first ten!"], chunks
    stats = http.statistics.fetch(srv.url)
    assert_equal [0, 1], [stats[:size], stats[:discarded]]
  end

  def test_a_request_started_past_the_deadline_fails_without_connecting
    srv = slow_server
    http = client(srv.url)
    Weft.run do
      error = Weft.deadline(0.05) do
        begin
          sleep 1
        rescue Weft::DeadlineExceeded
          nil # the deadline was raised once; the work goes on past it
        end
        assert_raises(Weft::HTTP::DeadlineExceeded) { http.get("/fast") }
      end
      assert_match(/Weft\.deadline/, error.message)
    end
    assert_equal 0, srv.connections
  end

  def test_an_own_deadline_longer_than_the_callers_is_cut_short
    srv = slow_server
    http = client(srv.url, deadline: 30)
    Weft.run do
      error = assert_elapsed_under(0.2 + SLACK + 0.1) do
        assert_raises(Weft::HTTP::DeadlineExceeded) { Weft.deadline(0.2) { http.get("/slow", deadline: 10) } }
      end
      assert_match(/Weft\.deadline/, error.message)
    end
  end
end
