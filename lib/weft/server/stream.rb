# frozen_string_literal: true

module Weft
  class Server
    # The bidirectional stream given to a Rack 3 streaming body (`body.call(stream)`) and to a
    # partial hijack callback: raw bytes in both directions over the connection, after the
    # response head. The app owns it and closes it.
    #
    # It reads and writes through the connection's Weft::Stream, so bytes the client sent after
    # the request (already in the connection's buffer) come first, TLS works the same, and every
    # way the client can go away is one error. Reads wait as long as the app likes (a WebSocket
    # may be quiet for minutes); each write waits at most the server's write_timeout for the
    # client to take bytes, like a response body.
    class Stream
      READ_SIZE = 16_384

      # @param connection [Connection] the connection the stream takes over (its reads and
      #   writes; the server no longer reads requests from it)
      def initialize(connection)
        @connection = connection
        @stream = connection.detach
      end

      # @return [String] the connection's description, for logs and the console
      def inspect
        "#<#{self.class.name} #{@connection.inspect}>"
      end

      # Reads `length` bytes, fewer at end of stream, or everything until the end when `length`
      # is nil; like IO#read. A client that goes away ends the stream.
      # @param buffer [String, nil] filled with the bytes (its content replaced) when given
      # @return [String, nil] nil at end of stream when `length` is positive
      def read(length = nil, buffer = nil)
        data = String.new(encoding: Encoding::BINARY)
        scratch = (@scratch ||= String.new(capacity: READ_SIZE, encoding: Encoding::BINARY))
        begin
          while length.nil? || data.bytesize < length
            size = length ? [length - data.bytesize, READ_SIZE].min : READ_SIZE
            break unless @stream.read_partial(size, scratch, nil)
            data << scratch
          end
        rescue Weft::ConnectionLost
          nil # the end of the stream, as far as the app is concerned
        end
        return nil if data.empty? && length&.positive?
        buffer ? buffer.replace(data) : data
      end

      # Reads whatever is available, waiting for at least one byte; like IO#readpartial.
      # @return [String]
      # @raise [EOFError] at end of stream
      # @raise [IOError] when the client broke the connection
      def read_partial(length = READ_SIZE)
        @stream.read_partial(length, nil, nil) or raise EOFError, "end of stream"
      rescue Weft::ConnectionLost => e
        raise IOError, "stream closed by the client: #{e.message}"
      end
      alias readpartial read_partial

      # @return [Integer] bytes written
      # @raise [IOError] when the client went away or took nothing for write_timeout
      def write(data)
        data = data.to_s
        @connection.write(data)
        data.bytesize
      rescue Weft::ConnectionLost, Weft::ConnectionStalled => e
        raise IOError, "stream closed by the client: #{e.message}"
      end

      # Writes and returns self, like IO#<<.
      def <<(data)
        write(data)
        self
      end

      # Writes are not buffered: nothing to flush.
      def flush
        self
      end

      # Stops reading (shuts down the socket's read side).
      def close_read
        shut(:close_read)
      end

      # Stops writing (the client sees end of stream), reading may go on.
      def close_write
        shut(:close_write)
      end

      # Closes the connection; the server stops counting it at once (Connection#close).
      def close
        @connection.close
      end

      # @return [Boolean]
      def closed?
        @stream.closed?
      end

      private

      def shut(direction)
        io = @stream.io
        io.public_send(direction) if io.respond_to?(direction) && !io.closed?
      rescue IOError, SystemCallError
        nil
      end
    end
  end
end
