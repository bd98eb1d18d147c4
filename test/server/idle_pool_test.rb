# frozen_string_literal: true

require_relative "../test_helper"
require "weft/server"

# Weft::Server::IdlePool on its own, with stand-in connections over socket pairs.
class ServerIdlePoolTest < Minitest::Test
  # What the pool needs of a connection (see IdlePool), over one end of a socket pair.
  class FakeConnection
    attr_accessor :registered_with_epoll
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

  def test_reclaim_closes_the_oldest_idle_connection_and_hands_back_one_whose_request_arrived
    with_and_without_epoll do
      handed_back = []
      pool = Weft::Server::IdlePool.new { |connection| handed_back << connection }
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
      pool.stop
    end
  end

  def test_stop_hands_back_every_parked_connection
    with_and_without_epoll do
      handed_back = []
      pool = Weft::Server::IdlePool.new { |connection| handed_back << connection }
      pool.start
      connections = Array.new(2) { FakeConnection.new }
      connections.each { |connection| pool.park(connection, 30) }
      pool.stop
      assert_equal connections, handed_back
      assert_equal 0, pool.size
    end
  end

  private

  # Runs the block in a reactor with epoll, then with the portable fallback.
  def with_and_without_epoll(&block)
    saved = Weft::Server::IdlePool.epoll?
    [saved, false].uniq.each do |epoll|
      Weft::Server::IdlePool.instance_variable_set(:@epoll, epoll)
      Weft.run(&block)
    end
  ensure
    Weft::Server::IdlePool.instance_variable_set(:@epoll, saved)
  end
end
