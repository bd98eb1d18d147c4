# frozen_string_literal: true

require "stringio"
require "tempfile"
require_relative "../errors"
require_relative "empty_input"

module Weft
  class Server
    # Reads a request body (Content-Length or chunked) off the connection into what becomes
    # rack.input: a StringIO while small, a temp file past `spool_threshold`, so a large upload
    # is never held whole in memory.
    #
    # The body is read completely before the app runs (as Puma and Unicorn do): the app then
    # gets a rewindable input that never blocks on a slow client, and the body timeout and size
    # limit are enforced by the server, not wherever the app happens to read.
    module RequestBody
      # The body is larger than max_body_bytes (413).
      class TooLarge < StandardError
        include Weft::Error
      end

      # The body could not be spooled to its temp file (a full disk, the file size limit, no
      # file descriptor left): the server's failure, not the client's (500). The message names
      # the system error and the file, for the log; the client is not told them.
      class SpoolFailed < StandardError
        include Weft::Error
      end

      module_function

      # @param connection [Connection] for #fill and #read_into
      # @param parser [HTTP1::RequestParser] the parsed head
      # @param buffer [String] the connection's buffer: bytes after the head (a chunked body is
      #   decoded from it in place; a Content-Length body is read through the connection, which
      #   takes these bytes first)
      # @param settings [ConnectionSettings] max_body_bytes, spool_threshold, body_timeout,
      #   body_min_rate (see Pace)
      # @yield when the client waits for 100 Continue and the body must be read
      # @return [EmptyInput, StringIO, Tempfile]
      def read(connection, parser, buffer, settings)
        length = parser.content_length
        chunked = parser.chunked?
        return EmptyInput::INSTANCE if !chunked && (length.nil? || length.zero?)

        limit = settings.max_body_bytes
        raise TooLarge, "body of #{length} bytes is over the limit of #{limit}" if length && length > limit
        yield if parser.expect_continue? && buffer.empty?

        sink = Sink.new(settings.spool_threshold)
        pace = Pace.new(settings.body_timeout, settings.body_min_rate)
        if chunked
          read_chunked(connection, buffer, sink, pace, limit)
        else
          read_length(connection, sink, pace, length)
        end
        sink.input
      rescue Exception # rubocop:disable Lint/RescueException
        sink&.discard # not read to its end: its temp file goes now, not at the next GC
        raise
      end

      # Reads never go past the body, so what follows it (a pipelined request) stays in the
      # connection's buffer, and the bytes that came with the head are taken first: the stream
      # does both (Weft::Stream#read_partial).
      def read_length(connection, sink, pace, length)
        # One buffer for the whole body, not a string per read (see Connection#read_into): the
        # first read makes it, the others refill it.
        chunk = nil
        while sink.size < length
          chunk = connection.read_into(chunk, pace.timeout(sink.size), [length - sink.size, Connection::READ_SIZE].min)
          sink << chunk
        end
      end

      # The decoder refuses (413) a chunk that would take the body past the limit as soon as
      # its size line arrives, so a client announcing a huge chunk is not read from at all.
      def read_chunked(connection, buffer, sink, pace, limit)
        decoder = HTTP1::ChunkedDecoder.new(max_body_size: limit)
        decoded = String.new(encoding: Encoding::BINARY)
        loop do
          done = decoder.decode(buffer, decoded)
          sink << decoded
          decoded.clear
          break if done
          connection.fill(pace.timeout(sink.size)) # appends to `buffer`, the connection's
        end
      end

      # How long the next read of a body may wait. Each read waits at most `body_timeout` (as
      # nginx's client_body_timeout), and with a `body_min_rate` the whole body must also keep
      # up with that rate once its first `body_timeout` is spent (as Apache's mod_reqtimeout
      # `body=20,MinRate=500`): by `started + body_timeout + received / min_rate`. Per read
      # alone, a byte every body_timeout - 1 s kept a request reading for good (20 bytes in 38 s
      # with body_timeout 3), a busy connection that max_connections never reclaims.
      class Pace
        # @param timeout [Numeric] body_timeout
        # @param min_rate [Integer, nil] bytes per second; nil: each read bounded only
        def initialize(timeout, min_rate)
          @timeout = timeout
          @min_rate = min_rate
          @started = Timers.now
        end

        # @param received [Integer] body bytes read so far
        # @return [Numeric] seconds the next read may wait
        # @raise [Connection::ClientTimeout] the body is behind its minimum rate
        def timeout(received)
          return @timeout unless @min_rate
          left = @started + @timeout + received.fdiv(@min_rate) - Timers.now
          raise Connection::ClientTimeout, "request body slower than #{@min_rate} bytes/s" unless left.positive?
          left < @timeout ? left : @timeout
        end
      end

      # Collects body bytes in memory, moving them to a temp file once past a threshold.
      #
      # The file is written with #syswrite, not #write: on Ruby 3.3 IO#write leaves the String it
      # wrote sharing its bytes with a hidden frozen copy, so the next read into the same buffer
      # (the body's pieces are read into one reused String) copies it first: a malloc the size of
      # every piece, the whole body again, freed only by the GC. A 100 MB upload grew a 3.3
      # server by ~50 MB that way (3.1 by ~1). #syswrite writes from the String's own bytes.
      class Sink
        # @return [Integer] bytes taken so far
        attr_reader :size

        # @param threshold [Integer] bytes kept in memory at most before the body moves to a
        #   temporary file (the server's spool_threshold)
        def initialize(threshold)
          @threshold = threshold
          @size = 0
          @string = String.new(encoding: Encoding::BINARY)
          @file = nil
        end

        # @raise [SpoolFailed] when the temp file cannot be made or written
        def <<(data)
          return self if data.empty?
          @size += data.bytesize
          if @file
            write_file(data)
          elsif @size > @threshold
            spool(data)
          else
            @string << data
          end
          self
        end

        # @return [StringIO, File] rewound, binary
        def input
          return StringIO.new(@string) unless @file
          @file.rewind
          @file
        end

        # Closes the temp file of a body that was not read to its end (the client went away,
        # timed out, sent too much; the file could not be written). It is unlinked already, but
        # its blocks stay taken on the disk while it is open, which without this lasted until the
        # GC collected it. @return [void]
        def discard
          @file&.close
          @file = nil
          @string = nil
        end

        private

        def spool(data)
          @file = Tempfile.new("weft-body")
          @file.binmode
          @file.unlink # nothing to clean up if the process dies
          write_file(@string)
          write_file(data)
          @string = nil
        rescue SystemCallError, IOError => e
          raise SpoolFailed, "could not create the request body's temp file: #{e.class}: #{e.message}"
        end

        # #syswrite may write part of it (a full disk's last blocks, the file size limit) and,
        # unlike #write, does not retry a write a signal interrupted (EINTR: on a regular file,
        # only on some network and FUSE file systems): the rest follows.
        def write_file(data)
          written = 0
          while written < data.bytesize
            begin
              written += @file.syswrite(written.zero? ? data : data.byteslice(written..))
            rescue Errno::EINTR
              next
            end
          end
        rescue SystemCallError, IOError => e
          raise SpoolFailed, "could not write the request body to its temp file: #{e.class}: #{e.message}"
        end
      end
    end
  end
end
