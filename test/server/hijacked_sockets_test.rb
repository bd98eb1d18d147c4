# frozen_string_literal: true

require_relative "../test_helper"
require_relative "support/server_helpers"
require "json"
require "socket"
require "weft/server"

# Connections the app takes over (full and partial hijack, streaming bodies) count until the
# app closes them: HijackedSockets on its own, then through a server (max_connections, the
# statistics). Their weight in a cluster's spreading, with real processes: cluster_test.rb.
class ServerHijackedSocketsTest < Minitest::Test
  include Weft::Test::ServerHelpers

  HijackedSockets = Weft::Server::HijackedSockets
  UPGRADE = "GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n"

  def teardown
    @pairs&.flatten&.each { |socket| socket.close unless socket.closed? }
  end

  def test_a_socket_counts_until_it_is_closed_or_removed
    hijacked = HijackedSockets.new
    first, second, third = Array.new(3) { pair.first }
    tokens = [first, second, third].map { |socket| hijacked.add(socket) }
    assert_equal 3, hijacked.size
    assert_equal 0, hijacked.sweep, "nothing was closed"
    first.close
    assert_equal 1, hijacked.sweep
    assert_equal 2, hijacked.size
    assert hijacked.remove(tokens[1]), "closed through the server's stream"
    refute hijacked.remove(tokens[1]), "counted once"
    second.close
    assert_equal 0, hijacked.sweep, "removed already"
    refute hijacked.remove(tokens[0]), "swept already"
    assert_equal 1, hijacked.size
    third.close
    assert_equal 1, hijacked.sweep
    assert_equal 0, hijacked.size
  end

  # The app dropped the socket without closing it: once the GC collects it (which closes its
  # descriptor), it stops counting. Held strongly, it would never be collected.
  def test_a_socket_the_app_dropped_stops_counting_once_collected
    hijacked = HijackedSockets.new
    # Made and dropped on another thread, whose stack is gone by the GC below.
    Thread.new { 10.times { hijacked.add(UNIXSocket.pair.first) } }.join
    assert_equal 10, hijacked.size
    swept = 0
    5.times do
      GC.start(full_mark: true, immediate_sweep: true)
      swept += hijacked.sweep
      break if swept == 10
    end
    assert_equal 10, swept, "sockets dropped and collected"
  end

  # A full hijack (a WebSocket) counts as hijacked, not open, while the app holds the socket;
  # once the app closes it, the next sweep (HijackedSockets::SWEEP_INTERVAL) takes it off. The
  # statistics say so. Rack 2's rack.hijack_io is the socket.
  def test_a_full_hijack_counts_until_the_app_closes_the_socket
    hijack_io = Queue.new
    with_server(websocket_app(hijack_io), stats_path: "/stats", metrics_path: "/metrics") do |server, port|
      socket = upgrade(port)
      returned, set = pop_within(hijack_io, 5)
      assert_same returned, set, "rack.hijack_io"
      assert_equal [0, 1], [server.open_connections, server.hijacked_connections]
      stats = JSON.parse(http_get(port, "/stats").body)
      assert_equal 1, stats["totals"]["connections_hijacked"]
      assert_match(/^weft_connections_hijacked\{worker="",pid="#{Process.pid}"\} 1$/, http_get(port, "/metrics").body)
      socket.write("hi\n")
      assert_equal "hi\n", socket.gets
      socket.close # the app sees the end, and closes its socket
      seen = eventually_within(HijackedSockets::SWEEP_INTERVAL + 2) { server.hijacked_connections.zero? }
      assert seen, "the closed WebSocket still counted"
    end
  end

  # A partial hijack closed through the server's stream stops counting at once, before any sweep.
  def test_a_partial_hijack_stops_counting_as_soon_as_the_app_closes_the_stream
    release = Queue.new
    app = lambda do |_env|
      [200, { "rack.hijack" => lambda { |stream|
        stream.write("held")
        Weft.spawn do
          release.pop
          stream.close
        end
      } }, []]
    end
    with_server(app) do |server, port|
      socket = connect(port)
      socket.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
      read_response(socket, head_request: true)
      assert_equal "held", socket.readpartial(4)
      assert_equal 1, server.hijacked_connections
      release << true
      assert_nil socket.read(1), "the app closed the stream"
      assert_equal 0, server.hijacked_connections, "not released at once"
    end
  end

  # max_connections counts the sockets the app holds: at the cap with two WebSockets open (none
  # idle to reclaim), a new client waits in the backlog until one of them is closed.
  def test_hijacked_connections_count_against_max_connections
    with_server(websocket_app, max_connections: 2) do |server, port|
      sockets = Array.new(2) { upgrade(port) }
      assert_equal 2, server.hijacked_connections
      waiting = connect(port)
      waiting.write("GET /hello HTTP/1.1\r\nHost: x\r\n\r\n")
      refute waiting.wait_readable(0.5), "answered past max_connections"
      sockets.first.close
      assert waiting.wait_readable(HijackedSockets::SWEEP_INTERVAL + 2), "not answered once a WebSocket closed"
      assert_equal 200, read_response(waiting).status
    ensure
      sockets&.each(&:close)
      waiting&.close
    end
  end

  # An app that writes a short answer on the hijacked socket and closes it at once: at
  # max_connections the server looks at its hijacked sockets before making a new client wait,
  # rather than stay full of closed ones until the next sweep (a second). Ten such requests in
  # a row at max_connections 2 (a wait for the sweep every other request without the look).
  def test_sockets_hijacked_and_closed_at_once_do_not_keep_the_server_full
    app = lambda do |env|
      io = env["rack.hijack"].call
      io.write("HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok")
      io.close
      [200, {}, []]
    end
    with_server(app, max_connections: 2) do |_, port|
      started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      10.times do
        socket = connect(port)
        socket.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert_equal "ok", Timeout.timeout(5) { read_response(socket).body }
        socket.close
      end
      elapsed = Process.clock_gettime(Process::CLOCK_MONOTONIC) - started
      assert_operator elapsed, :<, HijackedSockets::SWEEP_INTERVAL, "ten requests took #{elapsed.round(2)} s"
    end
  end

  private

  # A full hijack that answers 101, then echoes lines until the client closes, and closes.
  def websocket_app(hijack_io = nil)
    lambda do |env|
      return [200, { "content-type" => "text/plain" }, ["hello"]] unless env["PATH_INFO"] == "/ws"
      io = env["rack.hijack"].call
      hijack_io&.push([io, env["rack.hijack_io"]])
      io.write("HTTP/1.1 101 Switching Protocols\r\nconnection: upgrade\r\nupgrade: echo\r\n\r\n")
      Weft.spawn do
        while (line = io.gets)
          io.write(line)
        end
      rescue IOError, SystemCallError
        nil
      ensure
        io.close
      end
      [200, {}, []]
    end
  end

  def upgrade(port)
    socket = connect(port)
    socket.write(UPGRADE)
    assert_equal 101, read_response(socket, head_request: true).status
    socket
  end

  def pair
    (@pairs ||= []) << UNIXSocket.pair
    @pairs.last
  end

  def eventually_within(seconds)
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + seconds
    until yield
      return false if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
      sleep 0.02
    end
    true
  end
end
