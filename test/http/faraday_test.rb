# frozen_string_literal: true

require_relative "../test_helper"
require_relative "support"
require "faraday"
require "weft/http/faraday"

class HTTPFaradayAdapterTest < Minitest::Test
  def setup
    @servers = []
  end

  def teardown
    @connection&.close
    @servers.each(&:close)
  end

  def server(**options, &handler)
    (@servers << Weft::Test::HTTPServer.new(**options, &handler)).last
  end

  def faraday(url, **options, &block)
    @connection = Faraday.new(url, **options) do |f|
      block&.call(f)
      f.adapter :weft
    end
  end

  def test_requests_reuse_persistent_connections_across_faraday_calls
    srv = server { |r| [200, { "x-path" => r.path, "content-type" => "text/plain" }, "#{r.method} #{r.path} #{r.body}"] }
    conn = faraday(srv.url)
    5.times { |i| assert_equal "GET /#{i} ", conn.get("/#{i}").body }
    response = conn.post("/p", "data", "x-custom" => "1")
    assert_equal 200, response.status
    assert_equal "POST /p data", response.body
    assert_equal "/p", response.headers["X-Path"]
    assert_equal "1", srv.requests.last.env["HTTP_X_CUSTOM"]
    assert_equal 1, srv.connections
  end

  def test_timeouts_map_to_faraday_errors
    srv = server { sleep 1; [200, {}, "late"] }
    conn = faraday(srv.url, request: { read_timeout: 0.2 })
    assert_elapsed_under(1) { assert_raises(Faraday::TimeoutError) { conn.get("/") } }
    other = faraday(srv.url, request: { timeout: 0.2 })
    assert_raises(Faraday::TimeoutError) { other.get("/") }
    refused = faraday("http://127.0.0.1:#{free_tcp_port}")
    assert_raises(Faraday::ConnectionFailed) { refused.get("/") }
  end

  def test_open_timeout_is_a_connection_failure_as_with_net_http
    listener = Socket.new(:INET, :STREAM)
    listener.bind(Addrinfo.tcp("127.0.0.1", 0))
    listener.listen(0)
    filler = Socket.new(:INET, :STREAM)
    filler.connect_nonblock(listener.local_address, exception: false)
    conn = faraday("http://127.0.0.1:#{listener.local_address.ip_port}", request: { open_timeout: 0.3 })
    error = assert_elapsed_under(1.5) { assert_raises(Faraday::ConnectionFailed) { conn.get("/") } }
    assert_kind_of Weft::HTTP::ConnectTimeout, error.wrapped_exception
  ensure
    filler&.close
    listener&.close
  end

  def test_ssl_options
    certs = Weft::Test::Certificates.generate
    srv = server(tls: Weft::Test::Certificates.server_context(certs)) { [200, {}, "secure"] }
    assert_equal "secure", faraday(srv.url, ssl: { ca_file: certs[:ca_file] }).get("/").body
    assert_raises(Faraday::SSLError) { faraday(srv.url).get("/") }
    assert_equal "secure", faraday(srv.url, ssl: { verify: false }).get("/").body
  end

  def test_streaming_with_on_data
    srv = server { [200, {}, %w[one two three]] }
    conn = faraday(srv.url)
    chunks = []
    response = conn.get("/") do |request|
      request.options.on_data = proc { |chunk, _total, _env| chunks << chunk }
    end
    assert_equal 200, response.status
    assert_equal "onetwothree", chunks.join
  end

  def test_in_parallel_runs_requests_concurrently
    srv = server { |r| sleep 0.5; [200, {}, r.path] }
    conn = faraday(srv.url)
    responses = []
    assert_elapsed_under(2) do
      conn.in_parallel do
        8.times { |i| responses << conn.get("/#{i}") }
        assert responses.none?(&:finished?)
      end
    end
    assert_equal (0...8).map { |i| "/#{i}" }, responses.map(&:body)
    assert_equal [200] * 8, responses.map(&:status)
  end

  def test_in_parallel_raises_a_failure_after_all_ended
    srv = server { |r| r.path == "/slow" ? (sleep 1; [200, {}, ""]) : [200, {}, "ok"] }
    conn = faraday(srv.url, request: { read_timeout: 0.3 })
    responses = []
    assert_raises(Faraday::TimeoutError) do
      conn.in_parallel do
        responses << conn.get("/fast")
        responses << conn.get("/slow")
      end
    end
    assert_equal "ok", responses.first.body
  end
end
