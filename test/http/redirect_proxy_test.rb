# frozen_string_literal: true

require_relative "../test_helper"
require_relative "support"
require "weft/http"

class HTTPRedirectAndProxyTest < Minitest::Test
  include Weft::Test::HTTPFixtures

  def redirecting_server(target_base = "")
    server do |r|
      if r.path.start_with?("/r/")
        status = Integer(r.path.split("/").last)
        [status, { "location" => "#{target_base}/done" }, "moved"]
      else
        [200, {}, "#{r.method} body=#{r.body} auth=#{r.env['HTTP_AUTHORIZATION']}"]
      end
    end
  end

  def test_redirects_are_not_followed_unless_asked
    srv = redirecting_server
    response = client(srv.url).get("/r/302")
    assert_equal 302, response.status
    assert_equal "/done", response["location"]
  end

  def test_method_rules
    srv = redirecting_server
    http = client(srv.url, follow: 5)
    assert_equal "GET body= auth=", http.post("/r/303", body: "data").body
    assert_equal "GET body= auth=", http.post("/r/301", body: "data").body
    assert_equal "GET body= auth=", http.post("/r/302", body: "data").body
    assert_equal "POST body=data auth=", http.post("/r/307", body: "data").body
    assert_equal "PUT body=data auth=", http.put("/r/308", body: "data").body
    assert_equal "DELETE body= auth=", http.delete("/r/302").body
    assert_equal 1, srv.connections
  end

  def test_authorization_kept_on_the_same_origin_and_dropped_across_origins
    other = redirecting_server
    srv = server do |r|
      case r.path
      when "/away" then [302, { "location" => other.url("/done") }, ""]
      when "/stay" then [302, { "location" => "/home" }, ""]
      else [200, {}, "auth=#{r.env['HTTP_AUTHORIZATION']}"]
      end
    end
    http = client(srv.url, follow: 2)
    assert_equal "auth=Bearer t", http.get("/stay", headers: { "authorization" => "Bearer t" }).body
    assert_equal "GET body= auth=", http.get("/away", headers: { "Authorization" => "Bearer t" }).body
    assert_equal 1, other.requests.size
  end

  def test_a_streamed_body_is_not_replayed_on_307
    srv = redirecting_server
    response = client(srv.url, follow: 3).post("/r/307", body: %w[a b].each)
    assert_equal 307, response.status
  end

  def test_plain_http_through_a_proxy_uses_absolute_form
    origin = server { |r| [200, {}, "origin"] }
    seen = Queue.new
    proxy = server do |r|
      seen << [r.env["REQUEST_URI"] || "#{r.path}", r.env["HTTP_HOST"], r.env["HTTP_PROXY_AUTHORIZATION"]]
      [200, {}, "via proxy"]
    end
    proxy_url = "http://user:secret@127.0.0.1:#{proxy.port}"
    http = client(proxy: Weft::HTTP::Proxy.new(http: proxy_url, no_proxy: "example.org"))
    assert_equal "via proxy", http.get("#{origin.url}/path").body
    _, host, auth = seen.pop
    assert_equal "127.0.0.1:#{origin.port}", host
    assert_equal "Basic #{['user:secret'].pack('m0')}", auth
  end

  def test_https_through_a_connect_tunnel
    certs = Weft::Test::Certificates.generate
    origin = server(tls: Weft::Test::Certificates.server_context(certs)) { |r| [200, {}, "tunnelled #{r.path}"] }
    connects = Queue.new
    proxy = server(raw: true) do |socket|
      head = +""
      head << socket.readpartial(4096) until head.include?("\r\n\r\n")
      connects << head.lines.first.strip
      upstream = TCPSocket.new("127.0.0.1", origin.port)
      socket.write("HTTP/1.1 200 Connection established\r\n\r\n")
      pump = Thread.new { IO.copy_stream(upstream, socket) rescue nil }
      IO.copy_stream(socket, upstream) rescue nil
      pump.kill
      upstream.close
    end
    env = { "https_proxy" => "http://127.0.0.1:#{proxy.port}", "no_proxy" => "localhost" }
    http = client(origin.url, proxy: Weft::HTTP::Proxy.from_env(env), ssl: { ca_file: certs[:ca_file] })
    2.times { assert_equal "tunnelled /x", http.get("/x").body }
    assert_equal "CONNECT 127.0.0.1:#{origin.port} HTTP/1.1", connects.pop
    assert_equal 0, connects.size, "the tunnel is a kept-alive connection"
  end

  def test_proxy_refusing_connect
    proxy = server(raw: true) do |socket|
      socket.readpartial(4096)
      socket.write("HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\n\r\n")
    end
    http = client(proxy: "http://127.0.0.1:#{proxy.port}")
    assert_raises(Weft::HTTP::ProxyError) { http.get("https://127.0.0.1:1/") }
  end

  # The tunnel's write and read are part of connecting: a proxy that never answers CONNECT
  # uses up the connect timeout, not the read timeout.
  def test_a_proxy_silent_after_connect_is_a_connect_timeout
    proxy = server(raw: true) do |socket|
      socket.readpartial(4096)
      sleep 3
    end
    http = client(proxy: "http://127.0.0.1:#{proxy.port}", connect_timeout: 0.2, read_timeout: 30)
    started = Weft::Timers.now
    error = assert_raises(Weft::HTTP::ConnectTimeout) { http.get("https://127.0.0.1:1/") }
    assert_match(/connecting/, error.message)
    assert_operator Weft::Timers.now - started, :<, 2
  end

  def test_no_proxy_rules_and_environment
    proxy = Weft::HTTP::Proxy.new(http: "http://p:3128", https: "p:3129",
                                  no_proxy: "internal.example, .corp, 10.0.0.0/8, api.test:8080, ::1")
    origin = ->(url) { Weft::HTTP::Origin.from_uri(URI(url)) }
    assert_equal ["p", 3128], proxy.for(origin["http://example.com"]).to_a.first(2)
    assert_equal 3129, proxy.for(origin["https://example.com"]).port
    assert_nil proxy.for(origin["http://internal.example/"])
    assert_nil proxy.for(origin["http://a.internal.example/"])
    refute_nil proxy.for(origin["http://notinternal.example/"])
    assert_nil proxy.for(origin["http://x.corp/"])
    assert_nil proxy.for(origin["http://10.1.2.3/"])
    refute_nil proxy.for(origin["http://11.1.2.3/"])
    assert_nil proxy.for(origin["http://api.test:8080/"])
    refute_nil proxy.for(origin["http://api.test:8081/"])
    assert_nil proxy.for(origin["http://[::1]/"])
    assert_nil proxy.for(origin["unix:///run/x.sock"])
    assert_nil Weft::HTTP::Proxy.new(http: "http://p:1", no_proxy: "*").for(origin["http://a/"])
    assert_nil Weft::HTTP::Proxy.from_env({})
    assert_nil Weft::HTTP::Proxy.from_env({ "HTTP_PROXY" => "http://cgi-injected:1" }), "upper-case HTTP_PROXY is ignored"
  end
end
