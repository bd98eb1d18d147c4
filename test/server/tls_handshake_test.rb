# frozen_string_literal: true

require_relative "../test_helper"
require_relative "support/server_helpers"
require_relative "../support/certificates"
require "openssl"
require "tmpdir"

# Clients that never complete the TLS handshake on an ssl:// listener: one that stays silent,
# one that stops part-way, one that speaks plain HTTP to the TLS port, one that connects and
# leaves (a port scan, a TCP health check). Each must be closed (the silent one after
# first_data_timeout, the stalled one after header_timeout) and stop counting against
# max_connections. Before, the handshake's failure escaped the connection's task
# without closing it: the socket stayed open and the connection counted for good, so that
# max_connections of them (10,000 port scans) left a TLS server accepting no one.
class ServerTLSHandshakeTest < Minitest::Test
  include Weft::Test::ServerHelpers

  HELLO = ->(_env) { [200, { "content-type" => "text/plain" }, ["ok"]] }

  def with_tls_server(**options)
    Dir.mktmpdir do |dir|
      certs = Weft::Test::Certificates.generate(dir)
      binds = ["ssl://127.0.0.1:0?cert=#{certs[:cert_file]}&key=#{certs[:key_file]}"]
      with_server(HELLO, binds: binds, **options) { |server, port| yield server, port, certs }
    end
  end

  def tls_get(port, certs)
    context = OpenSSL::SSL::SSLContext.new
    context.ca_file = certs[:ca_file]
    context.verify_mode = OpenSSL::SSL::VERIFY_PEER
    socket = OpenSSL::SSL::SSLSocket.new(connect(port), context)
    socket.sync_close = true
    socket.hostname = "localhost"
    socket.connect
    socket.write("GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
    read_response(socket)
  ensure
    socket&.close
  end

  def test_a_failed_handshake_closes_the_connection_and_gives_its_room_back
    with_tls_server(max_connections: 2, header_timeout: 1, first_data_timeout: 1) do |server, port, certs|
      # Not TLS at all: the server's side of the handshake fails at once.
      plain = connect(port)
      plain.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
      assert closed_by_server?(plain, within: 3), "a plain HTTP client on the TLS port was left open"

      # Gone before the handshake.
      3.times { connect(port).close }

      # Silent: closed once first_data_timeout has passed (parked meanwhile, as on a plain
      # listener). Started and stalled: closed once header_timeout has passed.
      silent = connect(port)
      stalled = connect(port)
      stalled.write("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03".b) # the start of a ClientHello
      started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      { "silent" => silent, "stalled" => stalled }.each do |name, socket|
        assert closed_by_server?(socket, within: 5), "a #{name} client was left open"
        assert_in_delta 1.0, Process.clock_gettime(Process::CLOCK_MONOTONIC) - started, 0.9, name
      end

      deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 3
      sleep 0.02 until server.open_connections.zero? || Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
      assert_equal 0, server.open_connections, "connections that failed their handshake still count"
      # With max_connections 2, five failed handshakes left no room for this one before.
      assert_equal "ok", Timeout.timeout(5) { tls_get(port, certs) }.body
    end
  end

  # A client that connects and sends nothing waits parked, as on a plain listener: it holds no
  # fiber, and at max_connections it is closed to admit a new client (the one idle longest).
  # Before, its handshake waited in a fiber for all of header_timeout, and a TLS server full
  # of them made every new client wait that long.
  def test_silent_clients_are_parked_and_give_way_at_max_connections
    with_tls_server(max_connections: 2, header_timeout: 5) do |server, port, certs|
      silent = Array.new(3) { connect(port) }
      deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 3
      sleep 0.02 until server.statistics.snapshot[:connections_idle] == 2 || Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
      assert_equal 2, server.statistics.snapshot[:connections_idle], "silent TLS clients are not parked"
      started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      assert_equal "ok", Timeout.timeout(10) { tls_get(port, certs) }.body
      assert_operator Process.clock_gettime(Process::CLOCK_MONOTONIC) - started, :<, 2, "a new client waited for a silent one's handshake timeout"
      assert_operator silent.count { |socket| closed_by_server?(socket, within: 0.5) }, :>=, 1, "no silent client gave way"
    end
  end
end
