# frozen_string_literal: true

require_relative "../test_helper"
require_relative "support/server_helpers"

class ServerConcurrencyTest < Minitest::Test
  include Weft::Test::ServerHelpers

  def test_blocking_requests_overlap_in_one_process
    app = lambda do |env|
      sleep 0.5 # plain blocking Ruby: parks only this request's fiber
      [200, {}, [env["PATH_INFO"]]]
    end
    with_server(app) do |_, port|
      assert_elapsed_under(2) do
        threads = Array.new(20) { |i| Thread.new { http_get(port, "/#{i}").body } }
        assert_equal (0...20).map { |i| "/#{i}" }, threads.map(&:value)
      end
    end
  end

  def test_overlapping_net_http_to_a_slow_local_url
    app = lambda do |env|
      if env["PATH_INFO"] == "/slow"
        sleep 0.3
        [200, {}, ["slow"]]
      else
        body = Net::HTTP.get(URI("http://127.0.0.1:#{env['SERVER_PORT']}/slow"))
        [200, {}, ["fetched #{body}"]]
      end
    end
    with_server(app) do |_, port|
      assert_elapsed_under(1.5) do
        threads = Array.new(10) { Thread.new { http_get(port, "/fetch").body } }
        assert_equal ["fetched slow"] * 10, threads.map(&:value)
      end
    end
  end

  def test_idle_keep_alive_connections_hold_no_fiber
    with_server(->(_env) { [200, {}, ["x"]] }, stats_path: "/stats") do |server, port|
      baseline = JSON.parse(http_get(port, "/stats").body)["workers"][0]["fibers"]
      sockets = Array.new(200) do
        socket = connect(port)
        socket.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        read_response(socket)
        socket
      end
      # After `linger` (50 ms) without a request, each connection is parked without a fiber.
      stats = nil
      deadline = Weft::Timers.now + 3
      until (stats = JSON.parse(http_get(port, "/stats").body)["workers"][0])["connections_idle"] >= 200
        flunk("connections not parked: #{stats.inspect}") if Weft::Timers.now > deadline
        sleep 0.05
      end
      assert_equal 201, stats["connections_open"] # the 200 plus the stats request's own
      assert_operator stats["fibers"], :<=, baseline + 2, "idle connections hold fibers: #{stats.inspect}"
      # and they still work
      sockets.first(20).each do |socket|
        socket.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert_equal "x", read_response(socket).body
      end
      sockets.each(&:close)
      assert_operator server.open_connections, :<=, 201
    end
  end

  def test_max_connections_applies_back_pressure
    with_server(->(_env) { [200, {}, ["x"]] }, max_connections: 2) do |server, port|
      held = Array.new(2) do
        socket = connect(port)
        socket.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        read_response(socket)
        socket
      end
      waiting = connect(port) # accepted by the kernel, not by the server
      waiting.write("GET /late HTTP/1.1\r\nHost: x\r\n\r\n")
      refute waiting.wait_readable(0.3), "served beyond max_connections"
      assert_equal 2, server.open_connections
      held.first.close
      assert waiting.wait_readable(2), "not served after a slot freed up"
      assert_equal "x", read_response(waiting).body
    end
  end

  def test_graceful_stop_finishes_in_flight_requests
    started = Queue.new
    app = lambda do |_env|
      started << true
      sleep 0.5
      [200, {}, ["finished"]]
    end
    app = Rack::Lint.new(app)
    server = Weft::Server.new(app, binds: ["tcp://127.0.0.1:0"], shutdown_timeout: 5)
    port = server.listeners.first.port.to_i
    runner = Thread.new { server.run }
    client = Thread.new { http_get(port).body }
    started.pop
    server.stop
    assert_equal "finished", client.value
    assert runner.join(5), "server did not stop"
    assert_raises(Errno::ECONNREFUSED) { connect(port) }
  end
end

# The same idle-connection behaviour through the portable fallback (a waiting task per idle
# connection), which platforms without epoll use.
class ServerIdleFallbackTest < Minitest::Test
  include Weft::Test::ServerHelpers

  def setup
    @saved = Weft::Server::IdlePool.epoll?
    Weft::Server::IdlePool.instance_variable_set(:@epoll, false)
  end

  def teardown
    Weft::Server::IdlePool.instance_variable_set(:@epoll, @saved)
  end

  def test_parked_connections_are_woken_and_expire
    with_server(->(_env) { [200, {}, ["x"]] }, linger: 0, idle_timeout: 0.5) do |server, port|
      socket = connect(port)
      3.times do
        socket.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert_equal "x", read_response(socket).body
        sleep 0.05
      end
      assert_equal 1, server.idle_pool.size
      assert closed_by_server?(socket, within: 2)
    end
  end
end
