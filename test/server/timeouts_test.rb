# frozen_string_literal: true

require_relative "../test_helper"
require_relative "support/server_helpers"

class ServerTimeoutsTest < Minitest::Test
  include Weft::Test::ServerHelpers

  HELLO = ->(_env) { [200, { "content-type" => "text/plain" }, ["ok"]] }
  ECHO = ->(env) { [200, {}, [env["rack.input"].read]] }

  def test_slowloris_head_gets_408_and_is_closed
    with_server(HELLO, header_timeout: 0.5) do |server, port|
      socket = connect(port)
      assert_elapsed_under(3) do
        socket.write("GET / HTTP/1.1\r\n")
        6.times do
          sleep 0.15
          socket.write("X-A: b\r\n")
        rescue Errno::EPIPE, Errno::ECONNRESET
          break
        end
        response = read_response(socket)
        assert_equal 408, response.status
        assert closed_by_server?(socket)
      end
      assert_equal "ok", http_get(port).body
      assert_operator server.statistics.client_errors, :>=, 1
    end
  end

  def test_slow_body_gets_408
    with_server(ECHO, body_timeout: 0.4) do |_, port|
      socket = connect(port)
      socket.write("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc")
      assert_elapsed_under(2) do
        assert_equal 408, read_response(socket).status
        assert closed_by_server?(socket)
      end
    end
  end

  # A client still sending when its 408 comes (the rest of a slow head, of a slow body) must
  # be able to read it: a socket closed at once resets the connection at the client's next
  # bytes, and a reset can destroy the answer before the client reads it (RFC 9112 section
  # 9.6; Linux keeps what arrived, other stacks and a 408 not yet sent do not). So the server
  # shuts down its side after the 408 and takes what the client still sends for a while, as
  # after a 413: the client reads the 408, then a clean end of stream, and its writes in
  # between are taken. Before, these writes met EPIPE and the read after the 408 a reset.
  def test_a_408_for_a_slow_head_lingers_for_a_client_still_sending
    with_server(HELLO, header_timeout: 0.4) do |server, port|
      socket = connect(port)
      socket.write("GET / HTTP/1.1\r\nHost: x\r\n") # parked mid-head: its timer answers the 408
      assert_elapsed_under(4) { assert_lingers_after_408(socket, 0.6) }
      assert_equal "ok", http_get(port).body
      assert_operator server.statistics.client_errors, :>=, 1
    end
  end

  def test_a_408_for_a_slow_body_lingers_for_a_client_still_sending
    with_server(ECHO, body_timeout: 0.3) do |_, port|
      socket = connect(port)
      socket.write("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\nabc")
      assert_elapsed_under(4) { assert_lingers_after_408(socket, 0.5) }
    end
  end

  # A connection lingering after its 408 is idle: at max_connections a new client takes its
  # place at once, even while the old client keeps sending (its bytes are no request).
  def test_a_connection_lingering_after_a_408_gives_way_at_max_connections
    with_server(HELLO, header_timeout: 0.3, max_connections: 1) do |_, port|
      slow = connect(port)
      slow.write("GET / HTTP/1.1\r\nHost: x\r\n")
      sleep 0.5 # past header_timeout: answered 408, lingering (parked)
      slow.write("X-More: 1\r\n") # still sending: bytes wait in its socket
      assert_elapsed_under(1.5) { assert_equal "ok", http_get(port).body }
      assert_equal 408, read_response(slow).status
    end
  end

  # body_timeout bounds each read; body_min_rate bounds the body: past its first body_timeout
  # it must average the rate. A byte every 0.2 s (5 bytes/s) with body_timeout 0.6 used to keep
  # a request reading for as long as the client liked (20 bytes over 38 s with body_timeout 3).
  def test_a_body_trickling_below_body_min_rate_gets_408
    with_server(ECHO, body_timeout: 0.6, body_min_rate: 500) do |server, port|
      socket = connect(port)
      socket.write("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n")
      started = Weft::Timers.now
      answered = false
      until answered || Weft::Timers.now - started > 4
        begin
          socket.write("x")
        rescue Errno::EPIPE, Errno::ECONNRESET
          break
        end
        answered = socket.wait_readable(0.2)
      end
      assert_equal 408, read_response(socket).status
      elapsed = Weft::Timers.now - started
      assert_operator elapsed, :>=, 0.6 - 0.05, "not before its body_timeout"
      assert_operator elapsed, :<, 2, "within body_timeout (+ 20 bytes / 500 bytes/s) of the body's start"
      assert_operator server.statistics.client_errors, :>=, 1
    end
  end

  # A body keeping up with the rate goes on past body_timeout: 3,000 bytes in 6 pieces over
  # about 1.5 s, with body_timeout 0.5 (its deadline grows 1 s per 500 bytes received).
  def test_a_body_keeping_above_body_min_rate_is_read_past_body_timeout
    with_server(ECHO, body_timeout: 0.5, body_min_rate: 500) do |_, port|
      socket = connect(port)
      socket.write("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3000\r\n\r\n")
      started = Weft::Timers.now
      6.times do
        socket.write("y" * 500)
        sleep 0.25
      end
      response = read_response(socket)
      assert_operator Weft::Timers.now - started, :>, 0.5, "the body took longer than body_timeout"
      assert_equal 200, response.status
      assert_equal "y" * 3000, response.body
    end
  end

  # Without a minimum rate (body_min_rate nil) only each read is bounded, as before.
  def test_without_body_min_rate_only_each_read_is_bounded
    with_server(ECHO, body_timeout: 0.4, body_min_rate: nil) do |_, port|
      socket = connect(port)
      socket.write("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 8\r\n\r\n")
      8.times do
        sleep 0.2
        socket.write("z")
      end
      assert_equal "z" * 8, read_response(socket).body
    end
  end

  def test_idle_keep_alive_and_silent_connections_are_closed
    with_server(HELLO, idle_timeout: 0.4, first_data_timeout: 0.4) do |server, port|
      silent = connect(port)
      used = connect(port)
      used.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
      read_response(used)
      assert_elapsed_under(2) do
        assert closed_by_server?(silent, within: 1.5)
        assert closed_by_server?(used, within: 1.5)
      end
      sleep 0.05
      assert_equal 0, server.open_connections
    end
  end

  # After its second request a kept-alive connection lingers in its fiber for `linger`, then is
  # parked: not earlier (the client's clock starts when it has the response, a little after
  # the server's), and not much later (the linger wait is coarse: up to
  # Scheduler::COARSE_INTERVAL late, plus this shared machine's delays).
  def test_a_lingering_connection_is_parked_after_linger
    with_server(HELLO, linger: 0.3) do |server, port|
      socket = connect(port)
      2.times do
        socket.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert_equal 200, read_response(socket).status
      end
      answered = Weft::Timers.now
      sleep 0.002 until server.idle_pool.size == 1 || Weft::Timers.now - answered > 3
      parked = Weft::Timers.now - answered
      assert_operator parked, :>=, 0.3 - 0.02, "parked before its linger ran out"
      assert_operator parked, :<, 0.3 + Weft::Scheduler::COARSE_INTERVAL + 0.25, "parked late"
      socket.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
      assert_equal 200, read_response(socket).status, "answered once woken from the idle pool"
    end
  end

  # The idle timer fires after the reactor's poll, and the poll itself may run fibers for a
  # while (io-event resumes a fiber waiting on I/O from inside it). A request that arrived on
  # a parked connection meanwhile is in its socket, not yet seen by the idle pool's watcher:
  # it must be served, not reset with the connection when the timer fires.
  def test_a_request_arriving_as_the_idle_timeout_fires_is_served
    app = lambda do |env|
      if env["PATH_INFO"] == "/busy" # holds the reactor past the other connection's idle timeout
        finish = Weft::Timers.now + 0.6
        nil while Weft::Timers.now < finish
      end
      [200, {}, [env["PATH_INFO"]]]
    end
    with_server(app, idle_timeout: 0.3, linger: 0) do |server, port|
      parked = connect(port)
      parked.write("GET /first HTTP/1.1\r\nHost: x\r\n\r\n")
      assert_equal "/first", read_response(parked).body
      sleep 0.01 until server.idle_pool.size == 1
      busy = connect(port)
      # The body's last byte resumes the request's fiber from inside the poll; the app then
      # holds the reactor for 0.6 s, past the parked connection's idle timeout.
      busy.write("POST /busy HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\n")
      sleep 0.05
      busy.write("x")
      sleep 0.1
      parked.write("GET /second HTTP/1.1\r\nHost: x\r\n\r\n")
      assert_equal "/busy", read_response(busy).body
      assert parked.wait_readable(2), "no answer to the request sent before the idle timeout"
      assert_equal "/second", read_response(parked).body
    end
  end

  private

  # Waits past the timeout, sends more of the request (as a slow client does, unaware), then
  # reads: the 408, then the end of the stream (not a reset).
  def assert_lingers_after_408(socket, wait)
    sleep wait
    3.times do
      socket.write("X-More: #{'m' * 1000}\r\n")
      sleep 0.02
    end
    response = read_response(socket)
    assert_equal 408, response.status
    assert_equal "", socket.read, "the 408 is followed by a clean end of stream"
  end
end
