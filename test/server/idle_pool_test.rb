# frozen_string_literal: true

require_relative "../test_helper"
require_relative "support/server_helpers"
require "minitest/mock"
require "weft/server"

# Weft::Server::IdlePool on its own, with stand-in connections over socket pairs, once per
# strategy: the epoll one (Linux) and the portable one, forced here so Linux tests it too.
class ServerIdlePoolTest < Minitest::Test
  STRATEGIES = [Weft::Server::IdlePool::EpollStrategy, Weft::Server::IdlePool::PortableStrategy]
               .select { |strategy| strategy != Weft::Server::IdlePool::EpollStrategy || Weft::Readiness.available? }

  # What the pool needs of a connection (see IdlePool), over one end of a socket pair.
  class FakeConnection
    attr_reader :peer

    def initialize
      @socket, @peer = UNIXSocket.pair
    end

    def to_io
      @socket
    end

    def pending_input?
      data = @socket.recv_nonblock(1, Socket::MSG_PEEK, exception: false)
      data.is_a?(String) && !data.empty?
    end

    def close
      @socket.close unless @socket.closed?
    end

    def closed?
      @socket.closed?
    end

    alias idle_expired close
  end

  def test_the_default_strategy_is_epoll_where_readiness_is_available
    expected = Weft::Readiness.available? ? Weft::Server::IdlePool::EpollStrategy : Weft::Server::IdlePool::PortableStrategy
    assert_equal expected, Weft::Server::IdlePool.new {}.strategy
    assert_equal expected, Weft::Server::IdlePool.default_strategy
  end

  def test_a_connection_written_to_is_handed_back_once
    each_strategy do |pool, handed_back|
      connections = Array.new(3) { FakeConnection.new }
      connections.each { |connection| pool.park(connection, 30) }
      connections[1].peer.write("GET / HTTP/1.1\r\n")
      wait_until { handed_back.any? }
      sleep 0.05
      assert_equal [connections[1]], handed_back
      assert_equal 2, pool.size
      refute connections[1].closed?
    end
  end

  def test_a_peer_hanging_up_hands_the_connection_back
    each_strategy do |pool, handed_back|
      connection = FakeConnection.new
      pool.park(connection, 30)
      connection.peer.close
      wait_until { handed_back.any? }
      assert_equal [connection], handed_back
      assert_equal 0, pool.size
    end
  end

  def test_a_connection_parked_again_is_woken_again
    each_strategy do |pool, handed_back|
      connection = FakeConnection.new
      3.times do |round|
        pool.park(connection, 30)
        connection.peer.write("x")
        wait_until { handed_back.size == round + 1 }
        connection.to_io.read_nonblock(1) # served
      end
      assert_equal [connection] * 3, handed_back
    end
  end

  def test_a_silent_connection_expires_and_one_whose_request_arrived_does_not
    each_strategy do |pool, handed_back|
      silent = FakeConnection.new
      pool.park(silent, 0.1)
      wait_until { silent.closed? }
      assert_equal 0, pool.size
      assert_empty handed_back, "an expired connection was handed back"
    end
  end

  def test_a_connection_whose_request_arrived_as_its_timer_fired_is_served_not_expired
    each_strategy do |pool, handed_back|
      connection = FakeConnection.new
      pool.park(connection, 0.05)
      connection.peer.write("GET / HTTP/1.1\r\n")
      # Keep the reactor from polling until the timer is due: the timer and the readiness
      # come due in the same turn, and the timer runs first.
      finish = Weft::Timers.now + 0.1
      nil while Weft::Timers.now < finish
      wait_until { handed_back.any? }
      assert_equal [connection], handed_back
      refute connection.closed?
    end
  end

  def test_reclaim_closes_the_oldest_idle_connection_and_hands_back_one_whose_request_arrived
    each_strategy do |pool, handed_back|
      connections = Array.new(3) { FakeConnection.new }
      connections.each { |connection| pool.park(connection, 30) }
      connections[0].peer.write("GET / HTTP/1.1\r\n") # arrived, but the watcher has not run

      assert pool.reclaim_oldest
      assert_equal [connections[0]], handed_back, "the oldest had a request waiting: served, not closed"
      refute connections[0].closed?
      assert connections[1].closed?, "the oldest idle connection was not the one closed"
      refute connections[2].closed?
      assert_equal 1, pool.size

      assert pool.reclaim_oldest
      assert connections[2].closed?
      refute pool.reclaim_oldest, "nothing left to reclaim"
      assert_equal 0, pool.size
      sleep 0.05
      assert_equal [connections[0]], handed_back, "a connection taken out was woken later"
    end
  end

  def test_release_hands_back_the_selected_connections_and_they_are_not_watched_any_more
    each_strategy do |pool, handed_back|
      connections = Array.new(3) { FakeConnection.new }
      connections.each { |connection| pool.park(connection, 30) }
      pool.release { |connection| !connection.equal?(connections[1]) }
      assert_equal [connections[0], connections[2]], handed_back
      assert_equal 1, pool.size
      connections[0].peer.write("x")
      sleep 0.05
      assert_equal 2, handed_back.size, "a released connection was handed back a second time"
    end
  end

  def test_stop_hands_back_every_parked_connection
    each_strategy(stop: false) do |pool, handed_back|
      connections = Array.new(2) { FakeConnection.new }
      connections.each { |connection| pool.park(connection, 30) }
      pool.stop
      assert_equal connections, handed_back
      assert_equal 0, pool.size
    end
  end

  # Cluster workers are forked, and a Server (its pool with it) may be made before the fork:
  # each process must watch with an epoll instance of its own, or one would take the other's
  # wake-ups (the kernel object is shared across fork).
  def test_a_pool_made_before_a_fork_works_in_each_child
    skip "fork" unless Process.respond_to?(:fork)
    STRATEGIES.each do |strategy|
      handed_back = []
      pool = Weft::Server::IdlePool.new(strategy: strategy) { |connection| handed_back << connection }
      children = Array.new(2) do
        fork do
          ok = false
          Weft.run do
            pool.start
            connection = FakeConnection.new
            pool.park(connection, 30)
            connection.peer.write("x")
            deadline = Weft::Timers.now + 3
            sleep 0.01 until handed_back.any? || Weft::Timers.now > deadline
            ok = handed_back == [connection]
            pool.stop
          end
          exit!(ok ? 0 : 1)
        end
      end
      children.each { |pid| assert Process.wait2(pid)[1].success?, "#{strategy}: a child's parked connection was not woken" }
    end
  end

  private

  # Runs the block in a reactor with a started pool of each strategy.
  def each_strategy(stop: true)
    STRATEGIES.each do |strategy|
      Weft.run do
        handed_back = []
        pool = Weft::Server::IdlePool.new(strategy: strategy) { |connection| handed_back << connection }
        assert_equal strategy, pool.strategy
        pool.start
        yield pool, handed_back
        pool.stop if stop
      end
    end
  end

  def wait_until(seconds = 2)
    deadline = Weft::Timers.now + seconds
    sleep 0.005 until yield || Weft::Timers.now > deadline
    assert yield, "not within #{seconds} s"
  end
end

# The server's idle-connection behaviour with each strategy: the portable one is what
# platforms without epoll run, so Linux forces it here.
class ServerIdleStrategiesTest < Minitest::Test
  include Weft::Test::ServerHelpers

  OK = ->(_env) { [200, {}, ["x"]] }
  REQUEST = "GET / HTTP/1.1\r\nHost: x\r\n\r\n"

  def test_parked_connections_are_woken_and_expire
    each_strategy do
      with_server(OK, linger: 0, idle_timeout: 0.5) do |server, port|
        socket = connect(port)
        3.times do
          socket.write(REQUEST)
          assert_equal "x", read_response(socket).body
          sleep 0.05
        end
        assert_equal 1, server.idle_pool.size
        assert closed_by_server?(socket, within: 2)
        sleep 0.05
        assert_equal 0, server.idle_pool.size
      end
    end
  end

  def test_a_head_parked_unfinished_gets_408_at_header_timeout
    each_strategy do
      with_server(OK, header_timeout: 0.3) do |server, port|
        socket = connect(port)
        socket.write("GET / HTTP/1.1\r\nHo")
        sleep 0.01 until server.idle_pool.size == 1
        assert socket.wait_readable(2), "no answer at header_timeout"
        assert_equal 408, read_response(socket).status
        assert closed_by_server?(socket)
      end
    end
  end

  def test_at_max_connections_the_oldest_parked_connection_is_reclaimed
    each_strategy do
      with_server(OK, max_connections: 3, linger: 0) do |server, port|
        idle = Array.new(3) { connect(port).tap { |socket| socket.write(REQUEST) && read_response(socket) } }
        sleep 0.01 until server.idle_pool.size == 3
        client = connect(port)
        client.write(REQUEST)
        assert client.wait_readable(2), "a new client waited while 3 connections sat idle"
        assert_equal "x", read_response(client).body
        assert closed_by_server?(idle.first, within: 1)
        idle.drop(1).each { |socket| socket.write(REQUEST) && assert_equal("x", read_response(socket).body) }
      end
    end
  end

  def test_graceful_stop_serves_a_request_sent_within_the_drain_grace
    each_strategy do
      with_server(OK, linger: 0, drain_grace: 1) do |server, port|
        socket = connect(port)
        socket.write(REQUEST)
        read_response(socket)
        sleep 0.01 until server.idle_pool.size == 1
        server.stop
        sleep 0.1
        socket.write(REQUEST)
        response = read_response(socket)
        assert_equal ["x", "close"], [response.body, response["connection"]]
        assert closed_by_server?(socket)
      end
    end
  end

  private

  def each_strategy(&block)
    ServerIdlePoolTest::STRATEGIES.each do |strategy|
      Weft::Server::IdlePool.stub(:default_strategy, strategy, &block)
    end
  end
end
