# frozen_string_literal: true

require_relative "../test_helper"
require_relative "support/server_helpers"
require_relative "../support/certificates"
require "openssl"
require "tmpdir"
require "logger"
require "stringio"

class ServerRackFeaturesTest < Minitest::Test
  include Weft::Test::ServerHelpers

  def test_app_exception_gives_500_and_a_logged_backtrace
    app = ->(_env) { raise ArgumentError, "boom in app" }
    log = capture_log do
      with_server(app) do |server, port|
        assert_equal "500", http_get(port).code
        assert_equal "500", http_get(port).code # the server carries on
        assert_equal 2, server.statistics.responses_5xx
      end
    end
    assert_match(/ArgumentError: boom in app/, log)
    assert_match(/rack_features_test\.rb:\d+/, log) # the backtrace
  end

  def test_rack2_style_headers_and_body_close
    closed = false
    body = Object.new
    body.define_singleton_method(:each) { |&block| %w[a b].each(&block) }
    body.define_singleton_method(:close) { closed = true }
    app = ->(_env) { [200, { "Content-Type" => "text/plain", "Set-Cookie" => "a=1\nb=2", "X-Multi" => %w[x y] }, body] }
    with_server(app, lint: false) do |_, port|
      response, = raw_request(port, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
      assert_equal "ab", response.body
      assert_equal "a=1\nb=2", response["set-cookie"]
      assert_equal "x\ny", response["x-multi"]
      assert_equal "text/plain", response["content-type"]
    end
    assert closed, "body.close was not called"
  end

  def test_malformed_rack_responses_give_500
    app = lambda do |env|
      case env["PATH_INFO"]
      when "/nil" then nil
      when "/status" then ["abc", {}, []]
      when "/headers" then [200, nil, []]
      else [200, {}, nil]
      end
    end
    log = capture_log do
      with_server(app, lint: false) do |_, port|
        %w[/nil /status /headers /body].each do |path|
          response, = raw_request(port, "GET #{path} HTTP/1.1\r\nHost: x\r\n\r\n")
          assert_equal 500, response.status, path
        end
        assert_equal "500", http_get(port, "/nil").code # still serving
      end
    end
    assert_match(/invalid response/, log)
  end

  def test_app_content_length_is_sent_once
    app = ->(_env) { [200, { "Content-Length" => "3", "content-type" => "text/plain" }, Enumerator.new { |y| y << "abc" }] }
    with_server(app, lint: false) do |_, port|
      socket = connect(port)
      socket.write("GET / HTTP/1.1\r\nHost: x\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n")
      response = read_response(socket)
      assert_equal 1, response.raw.scan(/^content-length:/i).size, response.raw
      assert_equal "abc", response.body
      assert_equal "abc", read_response(socket).body # framing intact for the next response
    end
  end

  def test_header_injection_is_refused_with_500
    app = ->(_env) { [200, { "x-evil" => "a\r\nset-cookie: pwned" }, ["x"]] }
    log = capture_log do
      with_server(app, lint: false) do |_, port|
        response, = raw_request(port, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert_equal 500, response.status
        refute response["set-cookie"]
      end
    end
    assert_match(/invalid character in header x-evil/, log)
  end

  # A body longer than the content-length the app declared (an app passing on an upstream's
  # headers with a body it decompressed, say) must not go out past that length: the bytes beyond
  # it would be read by a proxy as the response to its next request on the connection (the head
  # did not say close). They are cut, the connection closed, and the app's error logged; a body
  # shorter than declared ends the connection too (the client sees it short).
  def test_a_body_longer_or_shorter_than_its_content_length_is_cut_and_logged
    app = lambda do |env|
      body = env["PATH_INFO"] == "/long" ? ["hello", "HTTP/1.1 200 OK\r\ncontent-length: 7\r\n\r\nsmuggle"] : ["hello"]
      [200, { "content-length" => env["PATH_INFO"] == "/long" ? "5" : "10" }, body]
    end
    log = capture_log do
      with_server(app, lint: false) do |server, port|
        socket = connect(port)
        socket.write("GET /long HTTP/1.1\r\nHost: x\r\n\r\nGET /next HTTP/1.1\r\nHost: x\r\n\r\n")
        response = read_response(socket)
        assert_equal "hello", response.body
        assert closed_by_server?(socket), "bytes past the content-length were sent, or the connection kept"

        socket = connect(port)
        socket.write("GET /short HTTP/1.1\r\nHost: x\r\n\r\n")
        assert_match(/content-length: 10\r\n/, socket.gets("\r\n\r\n"))
        assert_equal "hello", socket.read # then the end of the stream
        assert_equal 2, server.statistics.responses_5xx
      end
    end
    assert_match(%r{GET /long .*longer than its content-length of 5}, log)
    assert_match(%r{GET /short .*\(5 bytes\) is shorter than its content-length of 10}, log)
  end

  def test_streaming_each_body_arrives_incrementally
    app = lambda do |_env|
      body = Enumerator.new do |out|
        out << "event: one\n\n"
        sleep 0.4
        out << "event: two\n\n"
      end
      [200, { "content-type" => "text/event-stream" }, body]
    end
    with_server(app) do |_, port|
      socket = connect(port)
      socket.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
      started = Weft::Timers.now
      head = +""
      head << socket.readpartial(4096) until head.include?("event: one")
      assert_operator Weft::Timers.now - started, :<, 0.3, "first event was held back"
      rest = +""
      rest << socket.readpartial(4096) until rest.include?("0\r\n\r\n")
      assert_includes rest, "event: two"
    end
  end

  def test_streaming_body_call_is_bidirectional
    app = lambda do |_env|
      body = proc do |stream|
        stream.write("ready\n")
        line = stream.read(4)
        stream.write("echo:#{line}")
        stream.close
      end
      [200, { "content-type" => "text/plain" }, body]
    end
    with_server(app) do |_, port|
      socket = connect(port)
      socket.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
      data = +""
      data << socket.readpartial(4096) until data.include?("ready\n")
      socket.write("ping")
      data << socket.read
      assert_match(/\AHTTP\/1.1 200 OK\r\n/, data)
      assert data.end_with?("ready\necho:ping")
    end
  end

  def test_streaming_body_gets_bytes_sent_with_the_request_first
    app = lambda do |_env|
      body = proc do |stream|
        first = stream.read(5) # already buffered: came in the request's packet
        rest = stream.read               # then the socket, until the client shuts its side
        stream.write("got:#{first}|#{rest}")
        stream.close
      end
      [200, {}, body]
    end
    with_server(app) do |_, port|
      socket = connect(port)
      socket.write("GET / HTTP/1.1\r\nHost: x\r\n\r\nearly")
      sleep 0.05
      socket.write("later")
      socket.close_write
      assert socket.read.end_with?("\r\n\r\ngot:early|later")
    end
  end

  # read_partial is beyond Rack's stream interface (Rack::Lint's wrapper hides it), as on IO.
  def test_streaming_body_read_partial_at_the_end_raises_eof_error
    outcome = Queue.new
    app = lambda do |_env|
      body = proc do |stream|
        outcome << stream.read_partial(10)
        begin
          stream.read_partial(10)
        rescue EOFError => e
          outcome << e
        end
        outcome << stream.read(10) # IO#read: nil at the end when asked for bytes
        stream.close
      end
      [200, {}, body]
    end
    with_server(app, lint: false) do |server, port|
      socket = connect(port)
      socket.write("GET / HTTP/1.1\r\nHost: x\r\n\r\nbye")
      socket.close_write
      assert_equal "bye", pop_within(outcome, 2)
      assert_kind_of EOFError, pop_within(outcome, 2)
      assert_nil pop_within(outcome, 2)
      socket.read
      socket.close
      assert_equal 0, server.open_connections
    end
  end

  def test_streaming_body_write_to_a_client_that_went_away_raises_io_error
    outcome = Queue.new
    app = lambda do |_env|
      body = proc do |stream|
        stream.read(2) # wait for the client's signal, then it resets the connection
        sleep 0.1
        begin
          200.times { stream.write("x" * 65_536) }
          outcome << :no_error
        rescue IOError => e
          outcome << e
        ensure
          stream.close
        end
      end
      [200, {}, body]
    end
    with_server(app) do |server, port|
      socket = connect(port)
      socket.write("GET / HTTP/1.1\r\nHost: x\r\n\r\ngo")
      head = +""
      head << socket.readpartial(4096) until head.include?("\r\n\r\n") # the app has the stream
      socket.setsockopt(Socket::SOL_SOCKET, Socket::SO_LINGER, [1, 0].pack("ii")) # close = RST
      socket.close
      error = pop_within(outcome, 5)
      assert_kind_of IOError, error
      assert_match(/closed by the client/, error.message)
      assert_equal 0, server.open_connections
    end
  end

  def test_partial_hijack
    app = lambda do |env|
      assert env["rack.hijack?"]
      [200, { "rack.hijack" => ->(stream) { stream.write("raw bytes"); stream.close } }, []]
    end
    with_server(app) do |_, port|
      socket = connect(port)
      socket.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
      data = socket.read
      assert data.end_with?("\r\n\r\nraw bytes")
    end
  end

  def test_full_hijack_like_a_websocket_upgrade
    app = lambda do |env|
      io = env["rack.hijack"].call
      io.write("HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
      Thread.new do # the app owns the socket now, even beyond this request
        message = io.readpartial(100)
        io.write("echo:#{message}")
        io.close
      end
      [200, {}, []]
    end
    with_server(app) do |server, port|
      socket = connect(port)
      socket.write("GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
      response = read_response(socket, head_request: true)
      assert_equal 101, response.status
      socket.write("hi")
      assert_equal "echo:hi", socket.read
      assert_equal 0, server.open_connections
    end
  end

  # A full hijack that answers 101, then echoes the first bytes it reads (those the client sent
  # with the request)
  HIJACK_ECHO = lambda do |env|
    io = env["rack.hijack"].call
    io.write("HTTP/1.1 101 Switching Protocols\r\nconnection: upgrade\r\nupgrade: echo\r\n\r\n")
    io.write("echo:#{io.readpartial(100)}")
    io.close
    [200, {}, []]
  end

  # Sends an upgrade request with "early" behind it in the same write; asserts the echo.
  def assert_hijack_echoes_early_bytes(socket)
    socket.write("GET / HTTP/1.1\r\nHost: t\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\nearly")
    assert_equal 101, read_response(socket, head_request: true).status
    assert_equal "echo:early", socket.read
  end

  # A full hijack gets the bytes the client sent beyond the request first (the first frames of
  # a WebSocket, say), on the fast path and the Ruby path (a server with an access log) alike;
  # Rack::Lint checks that rack.hijack returns an IO
  def test_full_hijack_gets_the_bytes_sent_with_the_request
    [{}, { access_log: StringIO.new }].each do |options|
      with_server(HIJACK_ECHO, **options) do |server, port|
        assert_hijack_echoes_early_bytes(connect(port))
        settled = Time.now + 1 # the client sees the echo a moment before the request is finished
        sleep 0.01 until server.in_flight.zero? || Time.now > settled
        assert_equal 0, server.in_flight
      end
    end
  end

  # Over TLS the app gets the SSLSocket (not an IO: Rack::Lint would refuse it), with the
  # decrypted bytes sent beyond the request first. Closing it closes the socket beneath, and the
  # server stops counting the connection as hijacked (at its next look, within a second).
  def test_full_hijack_over_tls_gets_the_bytes_sent_with_the_request
    Dir.mktmpdir do |dir|
      certs = Weft::Test::Certificates.generate(dir)
      binds = ["ssl://127.0.0.1:0?cert=#{certs[:cert_file]}&key=#{certs[:key_file]}"]
      with_server(HIJACK_ECHO, lint: false, binds: binds) do |server, port|
        socket = OpenSSL::SSL::SSLSocket.new(connect(port), OpenSSL::SSL::SSLContext.new)
        socket.sync_close = true
        socket.connect
        assert_hijack_echoes_early_bytes(socket)
        released = Time.now + Weft::Server::HijackedSockets::SWEEP_INTERVAL + 2
        sleep 0.02 until server.hijacked_connections.zero? || Time.now > released
        assert_equal 0, server.hijacked_connections
      end
    end
  end

  def test_response_finished_callbacks
    calls = Queue.new
    app = lambda do |env|
      env["rack.response_finished"] << ->(e, status, _headers, error) { calls << [e["PATH_INFO"], status, error] }
      [201, {}, ["x"]]
    end
    with_server(app) do |_, port|
      http_get(port, "/done")
      assert_equal ["/done", 201, nil], pop_within(calls, 2)
    end
  end

  def test_access_log
    log = StringIO.new
    with_server(->(_env) { [200, {}, []] }, access_log: log) do |_, port|
      http_get(port, "/logged?x=1")
    end
    assert_match(%r{\A127\.0\.0\.1 - - \[.+\] "GET /logged\?x=1 HTTP/1.1" 200 - \d+\.\d{4}\n\z}, log.string)
  end

  def test_statistics_json_and_prometheus
    with_server(->(_env) { [200, {}, ["x"]] }, stats_path: "/stats", metrics_path: "/metrics") do |_, port|
      http_get(port, "/")
      stats = JSON.parse(http_get(port, "/stats").body)
      assert_operator stats["totals"]["requests"], :>=, 2
      worker = stats["workers"].first
      %w[in_flight connections_open fibers reactor_lag rss_bytes].each { |key| assert worker.key?(key), key }
      metrics = http_get(port, "/metrics").body
      assert_match(/^# TYPE weft_requests_total counter$/, metrics)
      assert_match(/^weft_requests_total\{worker="",pid="\d+"\} \d+$/, metrics)
      assert_match(/^weft_reactor_lag_seconds/, metrics)
    end
  end
end
