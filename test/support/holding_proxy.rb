# frozen_string_literal: true

require "socket"

module Weft
  module Test
    # A TCP proxy in front of the test server that can hold back or refuse new connections: a
    # cancel request travels on a new connection, so this makes the server act on it late, or
    # never.
    class HoldingProxy
      # @return [Float] seconds each connection accepted from now on waits before it is forwarded
      attr_accessor :hold
      # @return [Integer] how many of the next connections are closed at once instead
      attr_accessor :refuse

      def initialize(host, port)
        @upstream = [host, port]
        @server = TCPServer.new("127.0.0.1", 0)
        @hold = 0
        @refuse = 0
        @sockets = []
        @threads = [Thread.new { accept_loop }]
      end

      def port
        @server.addr[1]
      end

      def close
        @server.close
        @threads.each(&:kill).each(&:join)
        @sockets.each { |socket| socket.close unless socket.closed? }
      end

      private

      def accept_loop
        loop do
          client = @server.accept
          if @refuse.positive?
            @refuse -= 1
            client.close
            next
          end
          @sockets << client
          hold = @hold
          @threads << Thread.new { forward(client, hold) }
        end
      rescue IOError, SystemCallError
        nil
      end

      def forward(client, hold)
        sleep hold
        server = TCPSocket.new(*@upstream)
        @sockets << server
        copier = Thread.new { copy(client, server) }
        @threads << copier
        copy(server, client)
      end

      def copy(from, to)
        IO.copy_stream(from, to)
      rescue IOError, SystemCallError
        nil
      ensure
        to.close_write rescue nil # rubocop:disable Style/RescueModifier
      end
    end
  end
end
