# frozen_string_literal: true

require_relative "../test_helper"
require_relative "support/server_helpers"
require "json"

# HTTP1::FastPath (ext/weft_http1/fast_path.c) answers a plain request in one C call and hands
# everything else back to the Ruby path at the point it stops being plain. Rack::Lint wraps the
# body, which always sends a response to the Ruby writer, so these apps run without it (one
# test runs Lint on the env the fast path built). Each test names the branch of
# FastPath#serve it covers; the bytes are compared with the Ruby path's (a server with an
# access log, which the fast path does not do) where both answer.
class ServerFastPathTest < Minitest::Test
  include Weft::Test::ServerHelpers

  PLAIN = ->(env) { [200, { "content-type" => "text/plain" }, ["hello #{env['PATH_INFO']}"]] }

  # The bytes a server answers `requests` with (all sent at once), the date line blanked.
  def answers(app, requests, count: 1, **options)
    with_server(app, lint: false, **options) do |_, port|
      socket = connect(port)
      socket.write(requests)
      raw = Array.new(count) { read_response(socket).raw }
      socket.close
      raw.map { |response| response.sub(/^date: (?!Tue, 01 Jan 2030).*\r\n/, "date: -\r\n") }
    end
  end

  # Both paths' answers; asserts they are the same and returns the fast path's.
  def same_answers(app, requests, count: 1, **options)
    fast = answers(app, requests, count: count, **options)
    ruby = answers(app, requests, count: count, access_log: StringIO.new, **options)
    assert_equal ruby, fast
    fast
  end

  def test_server_uses_the_fast_path_only_without_an_access_log_or_request_deadline
    with_server(PLAIN, lint: false) { |server, _| refute_nil server.instance_variable_get(:@rack).fast_path }
    with_server(PLAIN, lint: false, access_log: StringIO.new) do |server, _|
      assert_nil server.instance_variable_get(:@rack).fast_path
    end
    with_server(PLAIN, lint: false, request_deadline: 5) do |server, _|
      assert_nil server.instance_variable_get(:@rack).fast_path
    end
  end

  # answered: plain responses, keep-alive, pipelining, Connection: close, HTTP/1.0
  def test_plain_responses_are_the_bytes_of_the_ruby_path
    app = lambda do |env|
      case env["PATH_INFO"]
      when "/dated" then [200, { "date" => "Tue, 01 Jan 2030 00:00:00 GMT" }, ["d"]]
      when "/parts" then [201, { "x-a" => "1", "X-Mixed-Case" => "2" }, ["a", "b" * 100, ""]]
      when "/empty" then [200, {}, []]
      when "/error" then [503, { "content-type" => "text/plain" }, ["busy"]]
      else PLAIN.call(env)
      end
    end
    requests = "GET /a?x=1 HTTP/1.1\r\nHost: h\r\n\r\nGET /dated HTTP/1.1\r\nHost: t\r\n\r\nGET /parts HTTP/1.1\r\nHost: t\r\n\r\n" \
               "GET /empty HTTP/1.1\r\nHost: t\r\n\r\nGET /error HTTP/1.1\r\nHost: t\r\n\r\nGET /last HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
    answers = same_answers(app, requests, count: 6)
    assert_equal "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ndate: -\r\ncontent-length: 8\r\n\r\nhello /a", answers[0]
    assert_includes answers[1], "date: Tue, 01 Jan 2030 00:00:00 GMT\r\n"
    assert_match(/\Ahttp\/1.1 201 Created\r\nx-a: 1\r\nX-Mixed-Case: 2\r\n/i, answers[2])
    assert_includes answers[4], "HTTP/1.1 503 Service Unavailable"
    assert_includes answers[5], "connection: close\r\n"

    http10 = same_answers(app, "GET /old HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET /old2 HTTP/1.0\r\n\r\n", count: 2)
    assert_includes http10[0], "connection: keep-alive\r\n"
    assert_includes http10[1], "connection: close\r\n"
  end

  # a request counts as in flight while its app runs (Connection#call_app starts it, the
  # connection ends it once the fast path has answered)
  def test_counts_requests_and_5xx_responses
    running = nil
    in_flight = Queue.new
    app = lambda do |env|
      in_flight << running.in_flight
      env["PATH_INFO"] == "/fail" ? [500, {}, ["no"]] : PLAIN.call(env)
    end
    with_server(app, lint: false) do |server, port|
      running = server
      socket = connect(port)
      socket.write("GET / HTTP/1.1\r\nHost: t\r\n\r\nGET /fail HTTP/1.1\r\nHost: t\r\n\r\n")
      2.times { read_response(socket) }
      assert_equal [1, 1], [in_flight.pop, in_flight.pop]
      assert_equal 2, server.statistics.requests
      assert_equal 1, server.statistics.responses_5xx
      assert_equal 0, server.in_flight
    end
  end

  # answered: the last request max_requests_per_connection allows says connection: close
  def test_max_requests_per_connection
    answers = same_answers(PLAIN, "GET /1 HTTP/1.1\r\nHost: t\r\n\r\nGET /2 HTTP/1.1\r\nHost: t\r\n\r\n", count: 2, max_requests_per_connection: 2)
    refute_includes answers[0], "connection: close"
    assert_includes answers[1], "connection: close\r\n"
  end

  # the env: Rack::Lint checks the one the fast path built (Lint's body wrapper then sends the
  # response to the Ruby writer); SERVER_NAME and SERVER_PORT from the Host header (cached, and
  # a Host not seen before through RackAdapter#fill_server_name) or the listener
  def test_env_passes_rack_lint_and_names_the_server
    seen = Queue.new
    app = lambda do |env|
      env["app.own"] = true # a copy of the frozen template, the app's to change
      seen << [env["SERVER_NAME"], env["SERVER_PORT"], env["REMOTE_ADDR"], env["rack.input"].read, env["HTTP_X_ONE"]]
      [200, { "content-type" => "text/plain" }, ["ok"]]
    end
    with_server(app) do |_, port|
      socket = connect(port)
      socket.write("GET / HTTP/1.1\r\nHost: example.com:8080\r\nX-One: 1\r\n\r\nGET / HTTP/1.1\r\nHost: example.com:8080\r\n\r\n" \
                   "GET / HTTP/1.1\r\nHost: [::1]\r\n\r\nGET / HTTP/1.0\r\n\r\n")
      4.times { assert_equal 200, read_response(socket).status }
      assert_equal ["example.com", "8080", "127.0.0.1", "", "1"], seen.pop
      assert_equal ["example.com", "8080", "127.0.0.1", "", nil], seen.pop
      assert_equal ["[::1]", "80", "127.0.0.1", "", nil], seen.pop
      assert_equal ["127.0.0.1", port.to_s, "127.0.0.1", "", nil], seen.pop
    end
  end

  # nil: a head that arrives in parts is finished by the Ruby path (Connection#read_head)
  def test_head_in_parts
    with_server(PLAIN, lint: false) do |_, port|
      socket = connect(port)
      socket.write("GET /split HTTP/1.1\r\nHo")
      sleep 0.1
      socket.write("st: x\r\n\r\n")
      assert_equal "hello /split", read_response(socket).body
      socket.write("GET /next HTTP/1.1\r\nHost: t\r\n\r\n")
      assert_equal "hello /next", read_response(socket).body
    end
  end

  # ParseError: answered with the parser's status, and counted
  def test_malformed_head
    with_server(PLAIN, lint: false) do |server, port|
      response, = raw_request(port, "GET / HTTP/1.1\r\nHost: t\r\nBad Header\r\n\r\n")
      assert_equal 400, response.status
      assert_equal 1, server.statistics.parse_errors
    end
  end

  # Hash: a request with a body (Content-Length or chunked) is read by the Ruby path
  def test_requests_with_a_body
    app = ->(env) { [200, {}, [env["rack.input"].read]] }
    answers = same_answers(app, "POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n\r\nabcPOST / HTTP/1.1\r\nHost: t\r\n" \
                                "Transfer-Encoding: chunked\r\n\r\n2\r\nxy\r\n0\r\n\r\nGET / HTTP/1.1\r\nHost: t\r\n\r\n", count: 3)
    assert answers[0].end_with?("\r\n\r\nabc")
    assert answers[1].end_with?("\r\n\r\nxy")
    assert answers[2].end_with?("\r\n\r\n")
  end

  # Hash: the statistics endpoints are answered by the Ruby path
  def test_statistics_endpoint
    with_server(PLAIN, lint: false, stats_path: "/stats") do |_, port|
      assert_equal "hello /other", http_get(port, "/other").body
      assert_equal 2, JSON.parse(http_get(port, "/stats").body)["totals"]["requests"]
    end
  end

  # Array, error: what the app raised is answered with a 500 (logged) by the Ruby path
  def test_app_error
    app = ->(env) { env["PATH_INFO"] == "/raise" ? raise("boom") : PLAIN.call(env) }
    answers = nil
    _, err = capture_subprocess_io do
      answers = answers(app, "GET /raise HTTP/1.1\r\nHost: t\r\n\r\nGET /after HTTP/1.1\r\nHost: t\r\n\r\n", count: 2)
    end
    assert_match(/\AHTTP\/1.1 500 /, answers[0])
    assert answers[1].end_with?("hello /after")
    assert_match(/boom/, err)
  end

  # Array, response: not plain (the Ruby writer's rules apply) - HEAD, 204, 304, a status that
  # is not an Integer, headers the writer interprets, Array header values, a body that is not
  # an Array, a response that is an object with to_ary
  def test_responses_that_are_not_plain
    response = Struct.new(:parts) { def to_ary = parts }
    app = lambda do |env|
      case env["PATH_INFO"]
      when "/204" then [204, {}, []]
      when "/304" then [304, { "etag" => "x" }, []]
      when "/string-status" then ["202", {}, ["s"]]
      when "/length" then [200, { "content-length" => "2" }, ["ab"]]
      when "/multi" then [200, { "set-cookie" => %w[a=1 b=2] }, ["m"]]
      when "/each" then [200, {}, Enumerator.new { |y| y << "e1" << "e2" }]
      when "/to_ary" then response.new([200, {}, ["t"]])
      else PLAIN.call(env)
      end
    end
    paths = %w[/204 /304 /string-status /length /multi /each /to_ary]
    requests = "HEAD /head HTTP/1.1\r\nHost: t\r\n\r\n" + paths.map { |path| "GET #{path} HTTP/1.1\r\nHost: t\r\n\r\n" }.join
    fast = with_server(app, lint: false) do |_, port|
      socket = connect(port)
      socket.write(requests)
      [read_response(socket, head_request: true), *paths.map { read_response(socket) }]
    end
    assert_equal ["", 204, 304, 202, 200, 200, 200, 200], [fast[0].body, *fast[1..].map(&:status)]
    assert_equal "11", fast[0]["content-length"]
    assert_equal "a=1\nb=2", fast[5]["set-cookie"]
    assert_equal "e1e2", fast[6].body
    assert_equal "chunked", fast[6]["transfer-encoding"]
    assert_equal "t", fast[7].body
  end

  # Array: rack.response_finished callbacks run after the response
  def test_response_finished_callbacks
    calls = Queue.new
    app = lambda do |env|
      env["rack.response_finished"] << ->(e, status, _headers, error) { calls << [e["PATH_INFO"], status, error] }
      [200, {}, ["x"]]
    end
    with_server(app, lint: false) do |_, port|
      assert_equal "x", http_get(port, "/done").body
      assert_equal ["/done", 200, nil], calls.pop(timeout: 2)
    end
  end

  # an exception that is not the app's error (here Interrupt-like) goes on up after the
  # callbacks the app registered ran; the connection is closed
  def test_exception_that_is_not_an_error
    calls = Queue.new
    fatal = Class.new(Exception) # rubocop:disable Lint/InheritException
    app = lambda do |env|
      env["rack.response_finished"] << ->(e, status, _headers, _error) { calls << [e["PATH_INFO"], status] }
      raise fatal, "stop" if env["PATH_INFO"] == "/fatal"
      PLAIN.call(env)
    end
    _, err = capture_subprocess_io do
      with_server(app, lint: false) do |server, port|
        socket = connect(port)
        socket.write("GET /fatal HTTP/1.1\r\nHost: t\r\n\r\n")
        assert closed_by_server?(socket)
        assert_equal ["/fatal", nil], calls.pop(timeout: 2)
        assert_equal "hello /ok", http_get(port, "/ok").body # the server goes on
        assert_equal 0, server.in_flight
      end
    end
    assert_match(/failed and nothing waited for it: .*stop/, err) # the connection's task ended with it
  end

  # Array: a full hijack (the app owns the socket)
  def test_full_hijack
    app = lambda do |env|
      io = env["rack.hijack"].call
      io.write("HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nhi")
      io.close
      [200, {}, []]
    end
    with_server(app, lint: false) do |_, port|
      assert_equal "hi", http_get(port, "/").body
    end
  end

  # Array, unsent: the socket takes part of a response; the Ruby path sends the rest. A client
  # that pipelines large responses without reading fills the socket buffers.
  def test_partial_write
    body = "z" * 60_000
    app = ->(_env) { [200, {}, [body]] }
    with_server(app, lint: false) do |_, port|
      socket = connect(port)
      socket.write("GET / HTTP/1.1\r\nHost: t\r\n\r\n" * 100)
      sleep 0.3 # the server fills the buffers and waits for the client
      100.times { assert_equal body, read_response(socket).body }
    end
  end

  # unsent: the client is gone when the response is sent (send fails; the Ruby path sees the
  # client gone and closes the connection)
  def test_client_gone_before_the_response
    slow = ->(env) { sleep 0.2 if env["PATH_INFO"] == "/slow"; PLAIN.call(env) } # rubocop:disable Style/Semicolon
    with_server(slow, lint: false) do |_, port|
      socket = connect(port)
      socket.write("GET /slow HTTP/1.1\r\nHost: t\r\n\r\n")
      socket.setsockopt(Socket::SOL_SOCKET, Socket::SO_LINGER, [1, 0].pack("ii")) # close with a reset
      socket.close
      sleep 0.3
      assert_equal "hello /after", http_get(port, "/after").body
    end
  end

  # answered during a graceful stop: connection: close
  def test_stop_while_the_app_runs
    server_ref = Queue.new
    app = lambda do |env|
      if env["PATH_INFO"] == "/stop"
        server_ref.pop.stop
        sleep 0.1 # the reactor begins the stop meanwhile
      end
      PLAIN.call(env)
    end
    with_server(app, lint: false) do |server, port|
      server_ref << server
      socket = connect(port)
      socket.write("GET /stop HTTP/1.1\r\nHost: t\r\n\r\n")
      response = read_response(socket)
      assert_equal "hello /stop", response.body
      assert_equal "close", response["connection"]
    end
  end

  # Hash: a Host not in the cache goes through the Ruby path once (RackAdapter#call splits and
  # caches it); the next request with it is answered in C
  def test_a_host_not_seen_before_is_cached_by_the_ruby_path
    seen = Queue.new
    app = ->(env) { seen << [env["SERVER_NAME"], env["SERVER_PORT"]]; PLAIN.call(env) } # rubocop:disable Style/Semicolon
    with_server(app, lint: false) do |server, port|
      rack = server.instance_variable_get(:@rack)
      ruby_calls = 0
      rack.define_singleton_method(:call) { |*args| ruby_calls += 1; super(*args) } # rubocop:disable Style/Semicolon
      socket = connect(port)
      2.times do
        socket.write("GET / HTTP/1.1\r\nHost: new.example:81\r\n\r\n")
        assert_equal "hello /", read_response(socket).body
        assert_equal %w[new.example 81], seen.pop
      end
      assert_equal 1, ruby_calls
      assert_equal 2, server.statistics.requests
      assert_equal 0, server.in_flight
    end
  end
end
