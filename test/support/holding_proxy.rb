# frozen_string_literal: true

require "socket"

module Weft
  module Test
    # A TCP proxy in front of the test server that can hold back or refuse new connections: a
    # cancel request travels on a new connection, so this makes the server act on it late, or
    # never. It can also hold back what the server sends after an error (its ReadyForQuery),
    # which PostgreSQL writes separately, so that a client reads the two at different times.
    class HoldingProxy
      # @return [Float] seconds each connection accepted from now on waits before it is forwarded
      attr_accessor :hold
      # @return [Integer] how many of the next connections are closed at once instead
      attr_accessor :refuse
      # @return [Float] seconds the server's messages after an ErrorResponse are held back, on
      #   connections accepted from now on (they must not ask for SSL or GSS encryption, whose
      #   one-byte answers are not messages: sslmode=disable, gssencmode=disable)
      attr_accessor :pause_after_error

      def initialize(host, port)
        @upstream = [host, port]
        @server = TCPServer.new("127.0.0.1", 0)
        @hold = 0
        @refuse = 0
        @pause_after_error = 0
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
          pause = @pause_after_error
          @threads << Thread.new { forward(client, hold, pause) }
        end
      rescue IOError, SystemCallError
        nil
      end

      def forward(client, hold, pause)
        sleep hold
        server = TCPSocket.new(*@upstream)
        @sockets << server
        copier = Thread.new { copy(client, server) }
        @threads << copier
        pause.positive? ? copy_messages(server, client, pause) : copy(server, client)
      end

      # Copies the server's messages (a type byte, then a length that counts itself) one at a
      # time, sleeping `pause` seconds after each ErrorResponse.
      def copy_messages(from, to, pause)
        while (header = from.read(5)) && header.bytesize == 5
          body = from.read(header.unpack1("@1N") - 4).to_s
          to.write(header, body)
          sleep pause if header.start_with?("E")
        end
      rescue IOError, SystemCallError
        nil
      ensure
        to.close_write rescue nil # rubocop:disable Style/RescueModifier
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
