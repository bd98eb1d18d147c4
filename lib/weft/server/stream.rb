# frozen_string_literal: true

module Weft
  class Server
    # The bidirectional stream given to a Rack 3 streaming body (`body.call(stream)`) and to a
    # partial hijack callback: raw bytes in both directions over the connection, after the
    # response head. The app owns it and closes it.
    class Stream
      READ_SIZE = 16_384

      def initialize(connection)
        @connection = connection
        @io = connection.hijack
        @pending = connection.take_buffered # bytes the client sent after the request
      end

      def inspect
        "#<#{self.class.name} #{@connection.inspect}>"
      end

      # Reads up to `length` bytes (all until EOF when nil), like IO#read. Socket reads go
      # through one scratch buffer per stream rather than a new string each.
      def read(length = nil, buffer = nil)
        data = String.new(encoding: Encoding::BINARY)
        data << @pending.slice!(0, length || @pending.bytesize)
        scratch = (@scratch ||= String.new(capacity: READ_SIZE, encoding: Encoding::BINARY))
        begin
          while length.nil? || data.bytesize < length
            data << @io.readpartial(length ? [length - data.bytesize, READ_SIZE].min : READ_SIZE, scratch)
            break if length && data.bytesize >= length
          end
        rescue EOFError, IOError, SystemCallError
          nil
        end
        return nil if data.empty? && length&.positive?
        buffer ? buffer.replace(data) : data
      end

      # Reads whatever is available, waiting for at least one byte; raises EOFError at the end.
      def read_partial(length = READ_SIZE)
        return @pending.slice!(0, length) unless @pending.empty?
        @io.readpartial(length)
      end
      alias readpartial read_partial

      # @return [Integer] bytes written
      def write(data)
        data = data.to_s
        @connection.write(data)
        data.bytesize
      rescue Connection::ClientGone, Connection::ClientTimeout => e
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
        @io.close_read if @io.respond_to?(:close_read) && !@io.closed?
      rescue IOError, SystemCallError
        nil
      end

      # Stops writing (the client sees end of stream), reading may go on.
      def close_write
        @io.close_write if @io.respond_to?(:close_write) && !@io.closed?
      rescue IOError, SystemCallError
        nil
      end

      # Closes the connection.
      def close
        @io.close unless @io.closed?
      rescue IOError, SystemCallError
        nil
      end

      # @return [Boolean]
      def closed?
        @io.closed?
      end
    end
  end
end
