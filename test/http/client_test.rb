# frozen_string_literal: true

require_relative "../test_helper"
require_relative "support"
require "weft/http"
require "zlib"
require "stringio"

class HTTPClientTest < Minitest::Test
  include Weft::Test::HTTPFixtures

  def echo_server
    server { |r| [200, { "x-method" => r.method }, "#{r.method} #{r.path}?#{r.query} #{r.body}"] }
  end

  def test_sequential_requests_reuse_one_keep_alive_connection
    srv = echo_server
    http = client(srv.url)
    15.times { |i| assert_equal "GET /#{i}? ", http.get("/#{i}").body }
    assert_equal 1, srv.connections
    stats = http.statistics.fetch(srv.url)
    assert_equal 15, stats[:checkouts]
    assert_equal 1, stats[:idle]
  end

  def test_methods_headers_query_and_base_path
    srv = server do |r|
      [201, { "x-seen" => r.env["HTTP_X_TOKEN"].to_s, "set-cookie" => "a=1" }, "#{r.method} #{r.path}?#{r.query}"]
    end
    http = client("#{srv.url}/api/", headers: { "x-token" => "t1" })
    response = http.get("users", query: { "q" => "a b", "n" => 2 })
    assert_equal 201, response.status
    assert_equal "GET /api/users?q=a+b&n=2", response.body
    assert_equal "t1", response["X-Seen"]
    assert_equal ["a=1"], response.headers.all("Set-Cookie")
    assert_equal "DELETE /x?", http.delete("/x").body
    # A fragment stays with the caller: it is not part of the request target.
    assert_equal "GET /api/users?q=1", http.get("users#top", query: { "q" => 1 }).body
    assert_equal "GET /x?a=1", http.get("/x?a=1#top").body
    # Methods as symbols or in any case, and one outside the common set, go out upper-case.
    assert_equal "PUT /s?", http.request(:put, "/s").body
    assert_equal "PATCH /p?", http.request("Patch", "/p").body
    assert_equal "PURGE /c?", http.request(:purge, "/c").body
    assert_equal "weft/#{Weft::VERSION}", srv.requests.first.env["HTTP_USER_AGENT"]
    assert_equal "127.0.0.1:#{srv.port}", srv.requests.first.env["HTTP_HOST"]
  end

  def test_credentials_in_the_url_become_basic_authorization
    srv = server { |r| [200, {}, r.env["HTTP_AUTHORIZATION"].to_s] }
    expected = "Basic #{['al ice:s3cret'].pack('m0')}"
    assert_equal expected, client.get("http://al%20ice:s3cret@127.0.0.1:#{srv.port}/").body
    assert_equal expected, client("http://al%20ice:s3cret@127.0.0.1:#{srv.port}").get("/x").body
    assert_equal "Bearer t", client.get("http://u:p@127.0.0.1:#{srv.port}/", headers: { "authorization" => "Bearer t" }).body
  end

  def test_request_bodies_string_io_and_enumerable
    srv = echo_server
    http = client(srv.url)
    assert_equal "POST /s? hello", http.post("/s", body: "hello").body
    assert_equal "PUT /io? from io", http.put("/io", body: StringIO.new("from io")).body
    assert_equal "PATCH /e? abc", http.patch("/e", body: %w[a b c].each).body
    assert_equal "POST /empty? ", http.post("/empty").body
    pieces = %w[pie ces]
    reader = Object.new
    reader.define_singleton_method(:read) { |_length| pieces.shift } # #read(length), no buffer
    assert_equal "POST /r? pieces", http.post("/r", body: reader).body
    envs = srv.requests.map(&:env)
    assert_equal "5", envs[0]["CONTENT_LENGTH"]
    assert_equal "7", envs[1]["CONTENT_LENGTH"]
    assert_equal "chunked", envs[2]["HTTP_TRANSFER_ENCODING"]
    assert_equal "0", envs[3]["CONTENT_LENGTH"]
    assert_equal 1, srv.connections
  end

  def test_non_ascii_header_values_and_bodies_and_a_lying_length
    srv = echo_server
    http = client(srv.url)
    body = "café ☕"
    response = http.post("/u", body: body, headers: { "x-name" => "Zoë".b, "x-utf8" => "naïve" })
    assert_equal "POST /u? #{body}".b, response.body
    assert_equal "naïve".b, srv.requests.last.env["HTTP_X_UTF8"]
    error = assert_raises(ArgumentError) { http.post("/", body: %w[abc].each, headers: { "content-length" => "10" }) }
    assert_match(/ended after 3 of 10/, error.message)
    assert_equal "GET /after? ", http.get("/after").body
    assert_raises(ArgumentError) { http.post("/", body: "four", headers: { "content-length" => "9" }) }
    assert_raises(ArgumentError) { http.post("/", body: "four", headers: { "content-length" => "4x" }) }
    chunked = http.post("/te", body: "by caller", headers: { "transfer-encoding" => "chunked" })
    assert_equal "POST /te? by caller", chunked.body
    cased = http.post("/te", body: "cased", headers: { "Transfer-Encoding" => "Chunked" })
    assert_equal "POST /te? cased", cased.body
    assert_raises(ArgumentError) { http.get("/café") }
  end

  def test_a_string_body_that_does_not_match_its_content_length_is_refused_before_connecting
    srv = echo_server
    http = client(srv.url, breaker: { window_calls: 2 })
    2.times do
      error = assert_raises(ArgumentError) { http.post("/", body: "four", headers: { "content-length" => "9" }) }
      assert_match(/does not match the body's 4 bytes/, error.message)
    end
    assert_empty http.statistics, "a connection was opened for a request that could not be sent"
    assert_equal "POST /? four", http.post("/", body: "four").body, "the caller's mistake opened the origin's breaker"
  ensure
    Weft::CircuitBreaker.unregister("http #{srv.url.chomp('/')}") if srv && defined?(Weft::CircuitBreaker)
  end

  # Both framings on the wire, or a coding the body is not sent in, is a request that a server
  # and a proxy in front of it may read differently (request smuggling's shape).
  def test_a_request_framed_two_ways_is_refused_before_connecting
    srv = echo_server
    http = client(srv.url)
    both = { "content-length" => "4", "transfer-encoding" => "chunked" }
    error = assert_raises(ArgumentError) { http.post("/", body: "four", headers: both) }
    assert_match(/both Content-Length and Transfer-Encoding/, error.message)
    error = assert_raises(ArgumentError) { http.post("/", body: "four", headers: { "transfer-encoding" => "gzip" }) }
    assert_match(/must end with chunked/, error.message)
    assert_raises(ArgumentError) { http.post("/", body: "four", headers: { "Transfer-Encoding" => "chunked, gzip" }) }
    assert_empty http.statistics, "a connection was opened for a request that could not be sent"
  end

  def test_invalid_arguments_are_rejected_before_anything_is_sent
    http = client("http://127.0.0.1:1")
    assert_raises(ArgumentError) { http.get("/", headers: { "x-bad" => "a\r\nInjected: 1" }) }
    assert_raises(ArgumentError) { http.get("/", headers: { "bad name" => "x" }) }
    assert_raises(ArgumentError) { http.request("BAD METHOD", "/") }
    assert_raises(ArgumentError) { http.get("ftp://example.com/") }
    assert_raises(ArgumentError) { client.get("/relative-without-base") }
    assert_raises(ArgumentError) { client(bogus: 1) }
  end

  def test_streams_a_chunked_response_as_it_arrives
    release = Queue.new
    srv = server(raw: true) do |socket|
      socket.readpartial(4096)
      socket.write("HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nfirst\r\n")
      release.pop
      socket.write("6\r\nsecond\r\n0\r\n\r\n")
      sleep 0.2
    end
    http = client(srv.url)
    chunks = []
    http.get("/") do |response|
      response.each_chunk do |chunk|
        chunks << chunk
        release << true if chunks.size == 1 # the first piece arrived before the rest was sent
      end
    end
    assert_equal %w[first second], chunks
  end

  def test_large_content_length_body_in_pieces
    payload = Random.new(1).bytes(3 * 1024 * 1024)
    srv = server { [200, {}, payload] }
    http = client(srv.url)
    pieces = 0
    size = 0
    http.get("/") { |r| r.read_body { |chunk| pieces += 1; size += chunk.bytesize } }
    assert_equal payload.bytesize, size
    assert_operator pieces, :>, 1
    assert_equal payload, http.get("/").body
    assert_equal 1, srv.connections
  end

  def test_abandoned_body_closes_the_connection_instead_of_reusing_it
    srv = server { |r| [200, {}, r.path == "/big" ? "x" * 500_000 : "small"] }
    http = client(srv.url)
    http.get("/big") { |response| response.each_chunk { break } }
    http.get("/big") { |_response| nil } # not read at all
    assert_equal "small", http.get("/small").body
    assert_equal 3, srv.connections
    assert_equal 2, http.statistics.fetch(srv.url)[:discarded]
  end

  def test_connection_close_and_http10_are_not_reused
    srv = server { |r| [200, r.path == "/close" ? { "connection" => "close" } : {}, "ok"] }
    http = client(srv.url)
    http.get("/close")
    http.get("/close")
    assert_equal 2, srv.connections
    http.get("/", headers: { "connection" => "close" }) # asked by the caller
    http.get("/")
    assert_equal 4, srv.connections
    raw = server(raw: true) do |socket|
      socket.readpartial(4096)
      socket.write("HTTP/1.0 200 OK\r\n\r\nuntil close")
    end
    assert_equal "until close", client(raw.url).get("/").body
  end

  # Response fields are looked up by scanning what arrived (no index is built per response):
  # any case, repeats joined in order, and the request's own fields win over the client's.
  def test_response_fields_any_case_and_repeated_and_request_fields_override_the_defaults
    seen = nil
    srv = server(raw: true) do |socket|
      seen = socket.readpartial(4096)
      socket.write("HTTP/1.1 200 OK\r\nX-Tag: a\r\nContent-Length: 2\r\nx-tag: b\r\nSet-Cookie: s=1\r\n" \
                   "SET-COOKIE: t=2\r\nConnection: close\r\n\r\nok")
    end
    response = client(srv.url).get("/", headers: { "user-agent" => "mine/1", "Accept-Encoding" => "identity",
                                                   "Host" => "example.test" })
    assert_equal "a, b", response["X-TAG"]
    assert_equal "a, b", response.headers[:"x-tag"]
    assert_equal %w[s=1 t=2], response.headers.all("set-cookie")
    assert response.headers.key?("Content-length")
    refute response.headers.key?("x-missing")
    assert_nil response["x-missing"]
    assert_equal({ "x-tag" => "a, b", "content-length" => "2", "set-cookie" => "s=1, t=2", "connection" => "close" },
                 response.headers.to_h)
    head = seen.split("\r\n")
    assert_equal "GET / HTTP/1.1", head.first
    assert_equal ["user-agent: mine/1"], head.grep(/\Auser-agent:/i)
    assert_equal ["Accept-Encoding: identity"], head.grep(/\Aaccept-encoding:/i)
    assert_equal ["Host: example.test"], head.grep(/\Ahost:/i)
  end

  def test_bodiless_responses_free_the_connection
    srv = server { |r| r.path == "/204" ? [204, {}, ""] : [200, {}, "body"] }
    http = client(srv.url)
    assert_equal "", http.head("/").body
    assert_equal 204, http.get("/204").status
    http.get("/204") { |response| assert_equal 204, response.status } # not read: nothing to read
    assert_equal "body", http.get("/").body
    assert_equal 1, srv.connections
  end

  # The Content-Length of an answer to HEAD, or of a 304, is the length of the body a GET would
  # get: it neither limits nor sizes a body that is not sent, and nothing is inflated.
  def test_the_length_of_a_body_not_sent_is_not_held_against_max_body_size
    length = (100 * 1024 * 1024).to_s
    srv = server do |r|
      fields = { "content-length" => length }
      fields["content-encoding"] = "gzip" if r.path == "/gzipped"
      [r.path == "/cached" ? 304 : 200, fields, ""]
    end
    http = client(srv.url, max_body_size: 1024)
    head = http.head("/file")
    assert_equal [200, "", length], [head.status, head.body, head["content-length"]]
    assert_equal [304, ""], http.get("/cached").then { |response| [response.status, response.body] }
    gzipped = http.head("/gzipped")
    assert_equal [length, "gzip"], [gzipped["content-length"], gzipped["content-encoding"]]
    assert_equal 1, srv.connections
  end

  def test_gzip_and_deflate_bodies_are_inflated
    text = "compress me " * 1000
    srv = server do |r|
      case r.path
      when "/gzip"
        io = StringIO.new
        gz = Zlib::GzipWriter.new(io)
        gz.write(text)
        gz.close
        [200, { "content-encoding" => "gzip" }, io.string.b.scan(/.{1,100}/m)]
      when "/deflate" then [200, { "content-encoding" => "deflate" }, Zlib::Deflate.deflate(text)]
      when "/raw-deflate"
        z = Zlib::Deflate.new(Zlib::DEFAULT_COMPRESSION, -Zlib::MAX_WBITS)
        [200, { "content-encoding" => "deflate" }, z.deflate(text, Zlib::FINISH)]
      when "/broken" then [200, { "content-encoding" => "gzip" }, "not gzip at all"]
      else [200, {}, r.env["HTTP_ACCEPT_ENCODING"].to_s]
      end
    end
    http = client(srv.url)
    assert_equal "gzip, deflate", http.get("/").body
    response = http.get("/gzip")
    assert_equal text, response.body
    assert_nil response["content-encoding"]
    assert_equal text, http.get("/deflate").body
    assert_equal text, http.get("/raw-deflate").body
    assert_raises(Weft::HTTP::MalformedResponse) { http.get("/broken") }
    own = http.get("/gzip", headers: { "accept-encoding" => "gzip" })
    assert_equal "gzip", own["content-encoding"]
    assert_equal text, Zlib.gunzip(own.body)
  end

  def test_unix_socket_origin
    dir = Dir.mktmpdir("weft-http")
    path = File.join(dir, "app.sock")
    srv = server(unix: path) { |r| [200, {}, "unix #{r.path} #{r.env['HTTP_HOST']}"] }
    http = client("unix://#{path}")
    3.times { assert_equal "unix /status localhost", http.get("/status").body }
    assert_equal 1, srv.connections
  ensure
    FileUtils.rm_rf(dir) if dir
  end

  def test_max_uses_and_idle_timeout_replace_connections
    srv = echo_server
    http = client(srv.url, max_uses: 2)
    5.times { http.get("/") }
    assert_equal 3, srv.connections

    srv2 = echo_server
    idle = client(srv2.url, idle_timeout: 0.1)
    idle.get("/")
    sleep 0.2
    idle.get("/")
    assert_equal 2, srv2.connections
  end

  # A server that says how long it keeps an idle connection (Keep-Alive: timeout=N) closes it
  # then: a request written at that moment fails (a POST cannot be sent again). The client
  # stops reusing such a connection a second before (half of N below two seconds).
  def test_a_connection_is_not_reused_past_the_servers_keep_alive_hint
    hinted = server { |_request| [200, { "keep-alive" => "timeout=1" }, "ok"] }
    http = client(hinted.url)
    http.post("/", body: "a")
    sleep 0.2
    http.post("/", body: "b")
    assert_equal 1, hinted.connections, "reused within the hint"
    sleep 0.6
    http.post("/", body: "c")
    assert_equal 2, hinted.connections, "reused 0.6 s into a 1 s keep-alive"

    plain = server { |_request| [200, {}, "ok"] }
    http = client(plain.url)
    http.post("/", body: "a")
    sleep 0.8
    http.post("/", body: "b")
    assert_equal 1, plain.connections, "without a hint the idle_timeout decides"
  end

  def test_keep_alive_hints_are_read_as_servers_send_them
    limit = ->(value) { Weft::HTTP::Connection.idle_limit([["Content-Type", "text/plain"], ["Keep-Alive", value]]) }
    assert_equal 4.0, limit.call("timeout=5, max=1000")
    assert_equal 74.0, limit.call("max=100, Timeout = 75")
    assert_equal 0.5, limit.call("timeout=1")
    assert_equal 0.0, limit.call("timeout=0")
    assert_nil limit.call("max=100")
    assert_nil limit.call("xtimeout=5")
    assert_nil Weft::HTTP::Connection.idle_limit([["Content-Length", "2"]])
  end

  def test_concurrent_requests_in_a_reactor_overlap_through_one_client
    srv = server { sleep 0.5; [200, {}, "slow"] }
    http = client(srv.url)
    bodies = assert_elapsed_under(2) do
      Weft.run { Weft.map(1..10) { http.get("/").body } }
    end
    assert_equal ["slow"] * 10, bodies
    assert_equal 10, srv.connections
    # The connections stay pooled for the next burst.
    assert_elapsed_under(1.5) { Weft.run { Weft.map(1..10) { http.get("/") } } }
    assert_equal 10, srv.connections
  end

  # max_connecting: a burst against an origin slower than a connect still gets a connection per
  # request (the pool grows on while none comes back), in waves of max_connecting, and never
  # more than the limit.
  def test_a_burst_opens_connections_in_waves_and_grows_only_while_none_comes_back
    slow = server { |_| sleep 0.3; [200, {}, "slow"] }
    http = client(slow.url, limit: 50, max_connecting: 4)
    assert_elapsed_under(0.9) do
      Weft.run { assert_equal ["slow"] * 12, Weft.map(1..12) { http.get("/").body } }
    end
    assert_equal 12, slow.connections
    fast = server { |_| [200, {}, "fast"] }
    http = client(fast.url, limit: 50, max_connecting: 4)
    Weft.run { assert_equal ["fast"] * 200, Weft.map(1..200) { http.get("/").body } }
    # Whether the pool stops growing before the limit depends on whether this origin answers
    # faster than a connect completes, which the test cannot hold: 8-22 connections on a loaded
    # machine, all 50 on a quiet one (12 of 17 runs, 2026-12-06, on this code and on the code
    # before that day's changes). The limit holds either way.
    assert_operator fast.connections, :<=, 50, "more connections than the limit"
    assert_raises(ArgumentError) { client(fast.url, max_connecting: 0) }
  end

  def test_per_origin_limit_queues_and_acquire_timeout
    srv = server { sleep 0.3; [200, {}, "ok"] }
    http = client(srv.url, limit: 2)
    Weft.run { Weft.map(1..6) { http.get("/") } }
    assert_equal 2, srv.connections
    error = assert_raises(Weft::HTTP::PoolTimeout) do
      Weft.run do
        Weft.map(1..3) { http.get("/", acquire_timeout: 0.1) }
      end
    end
    assert_kind_of Weft::HTTP::Error, error
  end

  def test_old_option_names_still_work
    srv = server { |r| r.path == "/slow" ? (sleep 0.3; [200, {}, "slow"]) : [200, {}, "ok"] }
    http = nil
    capture_io { http = client(srv.url, limit: 1, max_requests: 2) }
    3.times { http.get("/") }
    assert_equal 2, srv.connections
    error = assert_raises(Weft::HTTP::PoolTimeout) do
      capture_io do
        Weft.run do
          slow = Weft.spawn { http.get("/slow") }
          sleep 0.05 # let it take the only connection
          http.get("/", pool_timeout: 0.1)
        ensure
          slow.wait
        end
      end
    end
    assert_match(/acquire timeout of 0.1s/, error.message)
  end

  def test_threads_share_a_client_outside_a_reactor
    srv = server { sleep 0.2; [200, {}, "ok"] }
    http = client(srv.url)
    threads = 5.times.map { Thread.new { http.get("/").body } }
    assert_elapsed_under(1.5) { assert_equal ["ok"] * 5, threads.map(&:value) }
  end

  def test_tls_with_verification_and_session_resumption
    certs = Weft::Test::Certificates.generate
    srv = server(tls: Weft::Test::Certificates.server_context(certs)) { |r| [200, {}, "secure #{r.path}"] }
    http = client(srv.url, ssl: { ca_file: certs[:ca_file] })
    3.times { assert_equal "secure /a", http.get("/a").body }
    assert_equal 1, srv.connections
    refute_nil http.tls_session(srv.url)
    http.close_idle
    assert_equal "secure /b", http.get("/b").body
    assert_equal [false, true], srv.tls_resumed

    localhost = client("https://localhost:#{srv.port}", ssl: { ca_file: certs[:ca_file] })
    assert_equal "secure /", localhost.get("/").body
  end

  def test_tls_verification_failures_are_distinct
    certs = Weft::Test::Certificates.generate
    srv = server(tls: Weft::Test::Certificates.server_context(certs)) { [200, {}, "secure"] }
    error = assert_raises(Weft::HTTP::TLSVerificationError) { client(srv.url).get("/") }
    assert_match(/issuer/, error.message)
    other = Weft::Test::Certificates.generate(san: "DNS:other.example")
    elsewhere = server(tls: Weft::Test::Certificates.server_context(other)) { [200, {}, "secure"] }
    mismatch = client(elsewhere.url, ssl: { ca_file: other[:ca_file] })
    error = assert_raises(Weft::HTTP::TLSVerificationError) { mismatch.get("/") }
    assert_match(/hostname|match/i, error.message)
    assert_equal "secure", client(srv.url, ssl: { verify: false }).get("/").body
  end
end
