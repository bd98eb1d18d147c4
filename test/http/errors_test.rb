# frozen_string_literal: true

require_relative "../test_helper"
require_relative "support"
require "weft/http"
require "rbconfig"

# Every failure gets its own class, nothing waits past its deadline, and a broken connection
# never goes back to the pool.
class HTTPClientErrorsTest < Minitest::Test
  include Weft::Test::HTTPFixtures

  # A raw server answering each request on a connection with the next scripted reply.
  def scripted(*replies)
    server(raw: true) do |socket|
      replies.each do |reply|
        socket.readpartial(65_536)
        reply.respond_to?(:call) ? reply.call(socket) : socket.write(reply)
      end
      sleep 0.5
    end
  end

  def test_dns_failure
    error = assert_raises(Weft::HTTP::DNSError) { client.get("http://no-such-host.invalid/") }
    assert_kind_of Weft::HTTP::ConnectionError, error
    assert_kind_of Weft::HTTP::Error, error
  end

  # A name server that never answers, in a child process whose /etc/resolv.conf names it (a
  # mount namespace of its own: needs root and unshare, else skipped). The resolver's own
  # timeout is 3 s; the request's limits are far shorter, in a reactor and in a plain thread.
  UNANSWERED_DNS = <<~'RUBY'
    require "socket"
    require "weft/http"
    silent = UDPSocket.new
    silent.bind("127.0.0.77", 53) # takes the queries, answers none
    CLIENT = Weft::HTTP::Client.new("http://weft-test.invalid", proxy: nil)
    # @return [String] the class of the error the request ended with, and the seconds it took
    def timed(**options)
      started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      begin
        yield(-> { CLIENT.get("/", **options) })
        "answered"
      rescue StandardError => e
        "#{e.class} #{(Process.clock_gettime(Process::CLOCK_MONOTONIC) - started).round(2)}"
      end
    end
    puts timed(connect_timeout: 0.3, &:call)
    puts timed(deadline: 0.3, &:call)
    puts(timed(connect_timeout: 0.3) { |get| Weft.run { get.call } })
  RUBY

  def test_an_unanswered_dns_query_ends_at_the_connect_timeout_or_the_deadline
    skip "needs root for a resolv.conf of its own" unless Process.uid.zero?
    Dir.mktmpdir do |dir|
      conf = File.join(dir, "resolv.conf")
      File.write(conf, "nameserver 127.0.0.77\noptions timeout:3 attempts:1\n")
      mount = "mount --bind #{conf} /etc/resolv.conf"
      unless system("unshare", "-m", "sh", "-c", mount, out: File::NULL, err: File::NULL)
        skip "needs unshare(1) and mount --bind in a mount namespace of its own"
      end
      script = File.join(dir, "dns.rb")
      File.write(script, UNANSWERED_DNS)
      lib = File.expand_path("../../lib", __dir__)
      command = "#{mount} && exec #{RbConfig.ruby} -I#{lib} #{script}"
      lines = IO.popen(["unshare", "-m", "sh", "-c", command], &:readlines).map(&:split)
      assert_equal %w[Weft::HTTP::ConnectTimeout Weft::HTTP::DeadlineExceeded Weft::HTTP::ConnectTimeout],
                   lines.map(&:first), lines.inspect
      lines.each { |(_, seconds)| assert_operator Float(seconds), :<, 1.5, lines.inspect }
    end
  end

  def test_connection_refused_tcp_and_unix
    port = free_tcp_port
    assert_raises(Weft::HTTP::ConnectionRefused) { client.get("http://127.0.0.1:#{port}/") }
    assert_raises(Weft::HTTP::ConnectionRefused) { client("unix:///nonexistent/weft.sock").get("/") }
  end

  # A listener whose accept queue is full: the kernel drops further SYNs, so a connect to it
  # hangs as to a black-holed address.
  def blackhole
    listener = Socket.new(:INET, :STREAM)
    listener.bind(Addrinfo.tcp("127.0.0.1", 0))
    listener.listen(0)
    filler = Socket.new(:INET, :STREAM)
    filler.connect_nonblock(listener.local_address, exception: false)
    filler.wait_writable(1)
    @blackholes = [listener, filler]
    listener.local_address.ip_port
  end

  def test_connect_timeout_on_an_unanswered_syn
    port = blackhole
    error = assert_elapsed_under(1.5) do
      assert_raises(Weft::HTTP::ConnectTimeout) { client(connect_timeout: 0.3).get("http://127.0.0.1:#{port}/") }
    end
    assert_match(/connect timeout/, error.message)
  ensure
    @blackholes&.each(&:close)
  end

  def test_a_black_holed_address_leaves_time_for_the_next_one
    dead = blackhole
    srv = server { [200, {}, "second address"] }
    http = client("http://multi.test:#{srv.port}", connect_timeout: 3)
    connector = http.instance_variable_get(:@connector)
    addresses = [Addrinfo.tcp("127.0.0.1", dead), Addrinfo.tcp("127.0.0.1", srv.port)]
    connector.define_singleton_method(:resolve) { |*| addresses }
    assert_elapsed_under(2.8) { assert_equal "second address", http.get("/").body }
  ensure
    @blackholes&.each(&:close)
  end

  def test_connect_timeout_covers_the_tls_handshake
    srv = server(raw: true) { sleep 3 } # accepts TCP, never answers the ClientHello
    http = client("https://127.0.0.1:#{srv.port}", connect_timeout: 0.3)
    error = assert_elapsed_under(1.5) { assert_raises(Weft::HTTP::ConnectTimeout) { http.get("/") } }
    assert_kind_of Timeout::Error, error
    assert_kind_of Weft::TimeoutError, error
  end

  def test_read_timeout_and_the_connection_is_discarded
    srv = scripted(->(_socket) { sleep 2 })
    http = client(srv.url, read_timeout: 0.3)
    assert_elapsed_under(1.5) { assert_raises(Weft::HTTP::ReadTimeout) { http.get("/") } }
    stats = http.statistics.fetch(srv.url)
    assert_equal 0, stats[:size]
    assert_equal 1, stats[:discarded]
  end

  def test_write_timeout_when_the_server_does_not_read
    srv = server(raw: true) { sleep 5 }
    http = client(srv.url, write_timeout: 0.3)
    body = Enumerator.new { |y| 400.times { y << ("x" * 1_048_576) } }
    assert_elapsed_under(3) { assert_raises(Weft::HTTP::WriteTimeout) { http.post("/", body: body) } }
  end

  def test_an_early_response_to_an_upload_is_reported
    srv = server(raw: true) do |socket|
      socket.readpartial(1024)
      socket.write("HTTP/1.1 413 Payload Too Large\r\ncontent-length: 8\r\nconnection: close\r\n\r\ntoo big!")
      socket.close
    end
    http = client(srv.url)
    body = Enumerator.new { |y| 64.times { y << ("x" * 1_048_576) } }
    response = assert_elapsed_under(3) { http.post("/upload", body: body) }
    assert_equal 413, response.status
    assert_equal "too big!", response.body
    assert_equal 0, http.statistics.fetch(srv.url)[:size]
  end

  def test_deadline_bounds_a_trickling_body
    srv = scripted(lambda do |socket|
      socket.write("HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n")
      50.times { socket.write("x"); sleep 0.1 }
    end)
    http = client(srv.url, read_timeout: 1)
    error = assert_elapsed_under(1.2) { assert_raises(Weft::HTTP::DeadlineExceeded) { http.get("/", deadline: 0.5) } }
    assert_match(/deadline/, error.message)
  end

  def test_deadline_inside_a_reactor_and_per_task
    srv = server { |r| sleep(r.path == "/slow" ? 2 : 0); [200, {}, "ok"] }
    http = client(srv.url, deadline: 0.4)
    results = assert_elapsed_under(1.5) do
      Weft.run do
        Weft.map(%w[/slow /fast /slow /fast]) do |path|
          http.get(path).body
        rescue Weft::HTTP::DeadlineExceeded => e
          e.class
        end
      end
    end
    assert_equal [Weft::HTTP::DeadlineExceeded, "ok", Weft::HTTP::DeadlineExceeded, "ok"], results
  end

  def test_reset_mid_body_is_connection_reset_and_not_pooled
    srv = scripted("HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nonly ten b")
    http = client(srv.url)
    error = assert_raises(Weft::HTTP::ConnectionReset) { http.get("/") }
    assert_match(/10 of 100/, error.message)
    assert_equal 0, http.statistics.fetch(srv.url)[:size]

    chunked = scripted("HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n")
    assert_raises(Weft::HTTP::ConnectionReset) { client(chunked.url).get("/") }

    streamed = []
    srv2 = scripted("HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nonly ten b")
    assert_raises(Weft::HTTP::ConnectionReset) do
      client(srv2.url).get("/") { |response| response.each_chunk { |chunk| streamed << chunk } }
    end
    assert_equal ["only ten b"], streamed
  end

  def test_malformed_responses
    [
      "HTTP/1.1 OK\r\n\r\n",
      "garbage\r\n\r\n",
      "HTTP/1.1 200 OK\r\ncontent-length: 5\r\ntransfer-encoding: chunked\r\n\r\n",
      "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n"
    ].each do |reply|
      srv = scripted(reply)
      http = client(srv.url)
      assert_raises(Weft::HTTP::MalformedResponse, reply.inspect) { http.get("/") }
      assert_equal 0, http.statistics.fetch(srv.url)[:size]
    end
  end

  def test_stale_keep_alive_connection_is_retried_once_for_idempotent_requests
    ok = "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"
    drop = ->(socket) { socket.close } # the server reads the request, then closes: a stale connection
    srv = server(raw: true) do |socket, id|
      socket.readpartial(65_536)
      socket.write(ok)
      if id == 1
        socket.readpartial(65_536)
        drop.call(socket)
      else
        loop do
          socket.readpartial(65_536)
          socket.write(ok)
        end
      end
    end
    http = client(srv.url)
    assert_equal "ok", http.get("/").body
    assert_equal "ok", http.get("/").body # first attempt on the reused connection fails, retried
    assert_equal 2, srv.connections
  end

  def test_non_idempotent_requests_are_never_retried
    attempts = Queue.new
    srv = server(raw: true) do |socket|
      socket.readpartial(65_536)
      socket.write("HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
      request = socket.readpartial(65_536)
      attempts << request.lines.first
      socket.close
    end
    http = client(srv.url)
    http.get("/")
    assert_raises(Weft::HTTP::ConnectionReset) { http.post("/charge", body: "once") }
    assert_equal 1, attempts.size
    assert_equal 1, srv.connections
  end

  def test_fresh_connection_closing_early_is_not_retried
    srv = scripted(->(socket) { socket.close })
    assert_raises(Weft::HTTP::ConnectionReset) { client(srv.url).get("/") }
    assert_equal 1, srv.connections
  end

  def test_an_idle_connection_closed_by_the_server_is_replaced_silently
    srv = server(raw: true) do |socket|
      socket.readpartial(65_536)
      socket.write("HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
      sleep 0.05
      socket.close # idle close, as a server's keep-alive timeout does
    end
    http = client(srv.url)
    3.times do
      assert_equal "ok", http.get("/").body
      sleep 0.15
    end
    assert_equal 3, srv.connections
    assert_operator http.statistics.fetch(srv.url)[:discarded], :>=, 2
  end

  def test_too_many_redirects
    srv = server { |r| [302, { "location" => "/again#{r.path.size}" }, ""] }
    assert_raises(Weft::HTTP::TooManyRedirects) { client(srv.url, follow: 3).get("/") }
    assert_equal 4, srv.requests.size
  end
end
