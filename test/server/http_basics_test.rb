# frozen_string_literal: true

require_relative "../test_helper"
require_relative "support/server_helpers"

class ServerHTTPBasicsTest < Minitest::Test
  include Weft::Test::ServerHelpers

  HELLO = ->(env) { [200, { "content-type" => "text/plain" }, ["hello #{env['PATH_INFO']}"]] }

  def test_get_with_content_length_and_date
    with_server(HELLO) do |_, port|
      response = http_get(port, "/a?b=1")
      assert_equal "200", response.code
      assert_equal "hello /a", response.body
      assert_equal "8", response["content-length"]
      assert Time.httpdate(response["date"])
    end
  end

  def test_keep_alive_reuses_one_connection
    with_server(HELLO) do |server, port|
      socket = connect(port)
      3.times do |i|
        socket.write("GET /#{i} HTTP/1.1\r\nHost: x\r\n\r\n")
        response = read_response(socket)
        assert_equal "hello /#{i}", response.body
        assert_nil response["connection"]
      end
      assert_equal 1, server.statistics.connections_accepted
    end
  end

  def test_pipelined_requests_are_answered_in_order
    slow_first = lambda do |env|
      sleep 0.2 if env["PATH_INFO"] == "/1"
      HELLO.call(env)
    end
    with_server(slow_first) do |_, port|
      socket = connect(port)
      socket.write((1..4).map { |i| "GET /#{i} HTTP/1.1\r\nHost: x\r\n\r\n" }.join)
      bodies = Array.new(4) { read_response(socket).body }
      assert_equal ["hello /1", "hello /2", "hello /3", "hello /4"], bodies
    end
  end

  def test_connection_close_from_client
    with_server(HELLO) do |_, port|
      response, socket = raw_request(port, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
      assert_equal "close", response["connection"]
      assert closed_by_server?(socket)
    end
  end

  def test_http_1_0_closes_unless_keep_alive_asked
    with_server(HELLO) do |_, port|
      response, socket = raw_request(port, "GET / HTTP/1.0\r\n\r\n")
      assert_equal 200, response.status
      assert closed_by_server?(socket)

      response, socket = raw_request(port, "GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
      assert_equal "keep-alive", response["connection"]
      socket.write("GET /again HTTP/1.0\r\n\r\n")
      assert_equal "hello /again", read_response(socket).body
    end
  end

  def test_http_1_0_streamed_body_is_close_delimited
    app = ->(_env) { [200, { "content-type" => "text/plain" }, Enumerator.new { |y| y << "a" << "b" }] }
    with_server(app) do |_, port|
      socket = connect(port)
      socket.write("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
      raw = socket.read
      assert_match(/connection: close/, raw)
      refute_match(/transfer-encoding/i, raw)
      assert raw.end_with?("\r\n\r\nab")
    end
  end

  # An app that chunks its body itself (Rack 2's Rack::Chunked, a proxy passing an upstream's
  # body on) and sets transfer-encoding: chunked: an HTTP/1.0 client knows no chunked coding
  # (RFC 9112 section 6.1 and 7.1), so it gets the decoded body, close-delimited, and no
  # transfer-encoding. It used to get the chunk framing as part of its body.
  def test_an_app_chunked_body_is_decoded_for_an_http_1_0_client
    framed = ["3\r\none\r\n", "4\r\n,tw", "o\r\n", "0\r\n\r\n"]
    [framed, Enumerator.new { |y| framed.each { |part| y << part } }].each do |body|
      app = ->(_env) { [200, { "content-type" => "text/plain", "transfer-encoding" => "chunked" }, body] }
      with_server(app, lint: false) do |_, port|
        socket = connect(port)
        socket.write("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        raw = Timeout.timeout(5) { socket.read }
        head, body_read = raw.split("\r\n\r\n", 2)
        refute_match(/transfer-encoding/i, head)
        refute_match(/content-length/i, head)
        assert_match(/connection: close/, head)
        assert_equal "one,two", body_read, body.class.name

        socket = connect(port) # HTTP/1.1: passed through as the app framed it
        socket.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        response = read_response(socket)
        assert_equal "chunked", response["transfer-encoding"]
        assert_nil response["content-length"], "content-length beside transfer-encoding (RFC 9112 section 6.2)"
        assert_equal "one,two", response.body
      end
    end
  end

  # A body that is not the chunked framing it claims cannot be decoded: the connection is cut
  # after what could be, and the app's error logged, as for a body longer than its
  # content-length.
  def test_a_malformed_app_chunked_body_cuts_an_http_1_0_response
    app = ->(_env) { [200, { "transfer-encoding" => "chunked" }, ["3\r\none\r\n", "not a chunk"]] }
    log = StringIO.new
    original = Weft.logger
    Weft.logger = Logger.new(log)
    with_server(app, lint: false) do |_, port|
      socket = connect(port)
      socket.write("GET / HTTP/1.0\r\n\r\n")
      raw = Timeout.timeout(5) { socket.read }
      assert raw.end_with?("\r\n\r\none"), raw
    end
    assert_match(/response body/, log.string)
  ensure
    Weft.logger = original
  end

  def test_head_has_headers_but_no_body
    with_server(HELLO) do |_, port|
      socket = connect(port)
      socket.write("HEAD /x HTTP/1.1\r\nHost: x\r\n\r\nGET /y HTTP/1.1\r\nHost: x\r\n\r\n")
      head = read_response(socket, head_request: true)
      assert_equal "8", head["content-length"]
      assert_equal "hello /y", read_response(socket).body # nothing leaked between them
    end
  end

  def test_unknown_length_body_is_chunked
    app = ->(_env) { [200, { "content-type" => "text/plain" }, Enumerator.new { |y| y << "one," << "" << "two" }] }
    with_server(app) do |_, port|
      socket = connect(port)
      socket.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
      response = read_response(socket)
      assert_equal "chunked", response["transfer-encoding"]
      assert_equal "one,two", response.body
      socket.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n") # still usable
      assert_equal "one,two", read_response(socket).body
    end
  end

  def test_no_body_statuses
    app = ->(env) { [env["PATH_INFO"][1..].to_i, {}, []] }
    with_server(app) do |_, port|
      socket = connect(port)
      %w[204 304].each do |code|
        socket.write("GET /#{code} HTTP/1.1\r\nHost: x\r\n\r\n")
        response = read_response(socket)
        assert_equal code.to_i, response.status
        assert_nil response["content-length"]
        assert_nil response["transfer-encoding"]
      end
    end
  end

  def test_max_requests_per_connection
    with_server(HELLO, max_requests_per_connection: 2) do |_, port|
      socket = connect(port)
      socket.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
      assert_nil read_response(socket)["connection"]
      socket.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
      assert_equal "close", read_response(socket)["connection"]
      assert closed_by_server?(socket)
    end
  end

  def test_rack_env_contents
    seen = nil
    app = lambda do |env|
      seen = env.slice("SERVER_NAME", "SERVER_PORT", "REMOTE_ADDR", "rack.url_scheme", "QUERY_STRING", "HTTP_X_THING", "SCRIPT_NAME")
      [200, {}, []]
    end
    with_server(app) do |_, port|
      http_get(port, "/p?q=1", "X-Thing" => "v")
    end
    assert_equal({ "SERVER_NAME" => "127.0.0.1", "SERVER_PORT" => seen["SERVER_PORT"], "REMOTE_ADDR" => "127.0.0.1",
                   "rack.url_scheme" => "http", "QUERY_STRING" => "q=1", "HTTP_X_THING" => "v", "SCRIPT_NAME" => "" }, seen)
    refute_equal "80", seen["SERVER_PORT"]
  end

  # REMOTE_ADDR is read from the sockaddr's bytes (no getnameinfo): the same text
  # Addrinfo#ip_address gives, for IPv4, IPv6 and IPv4-mapped peers.
  def test_remote_addr_from_sockaddr_bytes
    ["127.0.0.1", "10.1.2.3", "::1", "2001:db8::8:800:200c:417a", "::ffff:192.0.2.1", "fe80::1:2"].each do |ip|
      address = Addrinfo.tcp(ip, 4567)
      assert_equal address.ip_address, Weft::Server::Listener.ip_address(address), ip
    end
  end
end
