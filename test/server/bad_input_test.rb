# frozen_string_literal: true

require_relative "../test_helper"
require_relative "support/server_helpers"

class ServerBadInputTest < Minitest::Test
  include Weft::Test::ServerHelpers

  HELLO = ->(_env) { [200, { "content-type" => "text/plain" }, ["ok"]] }

  CASES = {
    "malformed request line" => ["GET  / HTTP/1.1\r\nHost: x\r\n\r\n", 400],
    "invalid character in target" => ["GET /a\x01b HTTP/1.1\r\nHost: x\r\n\r\n", 400],
    "invalid character in header value" => ["GET / HTTP/1.1\r\nHost: x\r\nX-A: a\x00b\r\n\r\n", 400],
    "space before colon" => ["GET / HTTP/1.1\r\nHost : x\r\n\r\n", 400],
    "obs-fold" => ["GET / HTTP/1.1\r\nHost: x\r\nX-A: a\r\n  b\r\n\r\n", 400],
    "content-length with transfer-encoding" => ["POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400],
    "differing duplicate content-length" => ["POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd", 400],
    "invalid content-length" => ["POST / HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n", 400],
    "bad chunk size" => ["POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n", 400],
    # A trailer line without a colon is not a field line: skipped, it hid a request in the body.
    "request in a chunked trailer" => ["POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nGET /x HTTP/1.1\r\n\r\n", 400],
    "space before colon in a trailer" => ["POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX-A : b\r\n\r\n", 400],
    "missing host" => ["GET / HTTP/1.1\r\n\r\n", 400],
    "unsupported version" => ["GET / HTTP/2.0\r\nHost: x\r\n\r\n", 505],
    "oversize request line" => ["GET /#{'a' * 9000} HTTP/1.1\r\nHost: x\r\n\r\n", 414],
    "oversize headers" => ["GET / HTTP/1.1\r\nHost: x\r\n#{"X-A: #{'b' * 1000}\r\n" * 70}\r\n", 431],
    "too many headers" => ["GET / HTTP/1.1\r\nHost: x\r\n#{(1..101).map { |i| "X-#{i}: v\r\n" }.join}\r\n", 431],
    "binary garbage" => ["\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03 garbage\r\n\r\n", 400]
  }.freeze

  def test_each_malformed_request_gets_its_status_and_a_closed_connection
    with_server(HELLO) do |server, port|
      CASES.each do |name, (bytes, status)|
        response, socket = raw_request(port, bytes.b)
        assert_equal status, response.status, name
        assert_equal "close", response["connection"], name
        assert closed_by_server?(socket), "#{name}: connection left open"
      end
      assert_equal "ok", http_get(port).body # still serving
      assert_equal CASES.size, server.statistics.parse_errors
    end
  end

  def test_clients_that_vanish_midway_do_not_hurt_the_server
    with_server(HELLO) do |_, port|
      ["GET / HT", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nabc", "GET / HTTP/1.1\r\nHost: x\r\n\r\n"].each do |bytes|
        socket = connect(port)
        socket.write(bytes)
        socket.setsockopt(Socket::SOL_SOCKET, Socket::SO_LINGER, [1, 0].pack("ii")) # RST on close
        socket.close
      end
      assert_equal "ok", http_get(port).body
    end
  end
end
