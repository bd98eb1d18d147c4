# frozen_string_literal: true

require_relative "../test_helper"
require_relative "support/server_helpers"

# How the server ends a connection after its last response. A socket closed while the client's
# bytes wait unread in it (or arrive after the close) is answered by the kernel with a reset, and
# a reset throws away what the server's side had not sent yet: the end of the last response
# (RFC 9112 section 9.6). So the client must get the whole response and then the end of the
# stream, not "connection reset" part-way, whatever it sent after the request that ended the
# connection.
class ServerClosingTest < Minitest::Test
  include Weft::Test::ServerHelpers

  # Larger than what the kernel buffers on loopback (the server's send buffer grows to 4 MB): the
  # server is still writing when the client's next bytes arrive.
  BODY = "x" * (8 * 1024 * 1024)
  BIG = ->(_env) { [200, {}, [BODY]] }

  # A small receive buffer keeps most of the response in the server's send buffer when it
  # closes, where a reset discards it (a client on a slower network than loopback is in that
  # state for any response larger than what is in flight). Closed before #with_server's stop,
  # which the server's linger after its close would otherwise hold until the client closed.
  def slow_reader(port)
    socket = Socket.new(:INET, :STREAM)
    socket.setsockopt(Socket::SOL_SOCKET, Socket::SO_RCVBUF, 16_384)
    socket.connect(Socket.sockaddr_in(port, "127.0.0.1"))
    close_at_stop(socket)
  end

  # Reads to the end of the stream (or a reset) within a bound.
  # @return [Array(String, Symbol)] the bytes and :eof or :reset
  def read_to_end(socket, within: 10)
    data = +""
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + within
    loop do
      left = deadline - Process.clock_gettime(Process::CLOCK_MONOTONIC)
      flunk("no end of stream within #{within} s (#{data.bytesize} bytes read)") unless left.positive? && socket.wait_readable(left)
      data << socket.readpartial(1 << 20)
    end
  rescue EOFError
    [data, :eof]
  rescue Errno::ECONNRESET
    [data, :reset]
  end

  def assert_whole_response_then_eof(socket, requests: 1)
    data, ending = read_to_end(socket)
    assert_equal requests, data.scan("HTTP/1.1 200 OK").size, "responses (#{data.bytesize} bytes read, then #{ending})"
    assert_equal requests * BODY.bytesize, data.count("x"), "body bytes (then #{ending})"
    assert_equal :eof, ending
  end

  # The request says `connection: close`; the client pipelines another after it, which arrives
  # while the response is being written and is never read.
  def test_a_request_sent_after_connection_close_does_not_reset_the_response
    with_server(BIG) do |_, port|
      socket = slow_reader(port)
      socket.write("GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
      sleep 0.2 # the server is writing the response, and waits for the client to take it
      socket.write("GET /next HTTP/1.1\r\nHost: x\r\n\r\n")
      sleep 0.3
      assert_whole_response_then_eof(socket)
    end
  end

  # The same at max_requests_per_connection: the last response allowed says `connection: close`.
  def test_the_last_request_allowed_on_a_connection_is_not_reset_by_the_next
    with_server(BIG, max_requests_per_connection: 2) do |_, port|
      socket = slow_reader(port)
      socket.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n" * 2)
      sleep 0.2
      socket.write("GET /third HTTP/1.1\r\nHost: x\r\n\r\n")
      sleep 0.3
      assert_whole_response_then_eof(socket, requests: 2)
    end
  end

  # A client that sends nothing more is not kept waiting: the close is at once.
  def test_a_connection_close_request_alone_is_closed_at_once
    with_server(->(_env) { [200, {}, ["ok"]] }) do |_, port|
      socket = connect(port)
      socket.write("GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
      started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      data, ending = read_to_end(socket)
      assert_match(/\AHTTP\/1.1 200 OK.*ok\z/m, data)
      assert_equal :eof, ending
      assert_operator Process.clock_gettime(Process::CLOCK_MONOTONIC) - started, :<, 0.5
    end
  end
end
