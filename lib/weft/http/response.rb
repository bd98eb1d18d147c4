# frozen_string_literal: true

require "zlib"
require_relative "headers"
require_relative "errors"

module Weft
  module HTTP
    # A response. Its body is read from the connection on demand, piece by piece
    # (#each_chunk) or at once (#body); the connection goes back to the pool the moment the
    # body has been read to its end, and is closed if the response is closed before that: a
    # half-read connection is never reused.
    #
    # #body holds at most `max_body_size` bytes (after decompression), so a server cannot make
    # the client buffer more than it agreed to; #each_chunk streams without a limit.
    class Response
      # @return [Integer]
      attr_reader :status
      # @return [String] the reason phrase
      attr_reader :reason
      # @return [Headers]
      attr_reader :headers
      # @return [Request] the request this answers (the last one, after redirects)
      attr_reader :request

      # @api private: made by Client
      # @param head [Connection::Head]
      # @param request [Request]
      # @param hold [#read, #finish] the connection (the client's Hold): `read(into)` returns the
      #   next raw piece of body or nil at its end; `finish(complete)` is called with true once
      #   the body is read to the end, with false when it is abandoned (the connection must then
      #   be closed)
      # @param decode [Boolean] inflate gzip/deflate bodies (the client asked for them)
      # @param max_body_size [Integer, nil] the most bytes #body holds
      # (Positional, not keywords: a keyword to Class#new, a C method, costs Hashes per request.)
      def initialize(head, request, hold, decode, max_body_size = nil)
        @status = head.status
        @reason = head.reason
        @request = request
        @hold = hold # nil once the connection was handed back
        @headers = Headers.new(head.headers)
        # A response without a body (to HEAD, a 204, a 304) has nothing to inflate: its
        # Content-Encoding and Content-Length describe the body a GET would get, and stay.
        @inflater = decode && head.framing != :none ? inflater_for(@headers["content-encoding"]) : nil
        # The decoded body has neither the coding nor the length the server sent.
        @headers = @headers.without("content-encoding", "content-length") if @inflater
        @inflated = false
        @length = head.length
        @max_body_size = max_body_size
        @body = nil
        @done = false
      end

      # @return [String, nil] a field's value (case-insensitive)
      def [](name)
        @headers[name]
      end

      # @return [Boolean] 2xx
      def success?
        @status >= 200 && @status < 300
      end

      # @return [Boolean] a redirect with a Location
      def redirect?
        [301, 302, 303, 307, 308].include?(@status) && !@headers["location"].nil?
      end

      # Yields the body piece by piece as it arrives (decoded when gzip/deflate). Can be called
      # once; afterwards the body is gone (unless #body read it first). Not limited by
      # `max_body_size`: what is kept is up to the block.
      #
      # @param buffer [String, nil] a String to read each piece into, yielded every time in place
      #   of a new String per piece (copy what you keep): for large downloads, it saves an
      #   allocation per read. Inflated pieces are new Strings either way.
      # @yieldparam chunk [String] binary
      # @return [self]
      def each_chunk(buffer = nil, &block)
        return enum_for(:each_chunk, buffer) unless block
        if @body
          yield @body unless @body.empty?
          return self
        end
        raise Weft::UsageError, "the body was already read, or the response closed" if @done

        begin
          pump(buffer, &block)
        ensure
          close
        end
        self
      end
      alias read_body each_chunk

      # The whole body (read now if it was not yet).
      # @return [String] binary
      # @raise [BodyTooLarge] when it is longer than `max_body_size`: at once when the
      #   Content-Length says so, otherwise as soon as the bytes read do (the connection is
      #   closed)
      def body
        return @body if @body
        raise Weft::UsageError, "the body was already consumed by #each_chunk, or the response closed" if @done

        limit = @max_body_size
        check_length(limit) if limit && @length && !@inflater
        # Sized up front when the length is known, so a large body is not copied as it grows (a
        # small one is not: the keyword to String.new costs more than growing it would).
        # String.new without arguments is binary.
        presize = [@length || 0, limit || MAX_PRESIZE, MAX_PRESIZE].min
        buffer = presize > PRESIZE_FROM ? String.new(capacity: presize, encoding: Encoding::BINARY) : String.new
        begin
          # One read buffer for every piece: nothing is allocated per read.
          pump(String.new) do |chunk|
            too_large(limit, "more than #{limit} bytes") if limit && buffer.bytesize + chunk.bytesize > limit
            buffer << chunk
          end
        ensure
          close
        end
        @body = buffer
      end
      alias read body

      # Ends the response. If the body was not read to its end, the connection is closed (it
      # holds unread bytes); otherwise it has already gone back to the pool. Idempotent.
      def close
        return if @done
        @done = true
        release(false)
        close_inflater
      end

      # @return [Boolean] whether the body was read or the response closed
      def closed?
        @done
      end

      # @return [String] the status line's code and reason, for logs and the console
      def inspect
        "#<#{self.class.name} #{@status} #{@reason}>"
      end

      private

      # The largest buffer #body allocates before the bytes arrive.
      MAX_PRESIZE = 8 * 1024 * 1024
      # Bodies up to this many bytes are not presized.
      PRESIZE_FROM = 4096
      private_constant :MAX_PRESIZE, :PRESIZE_FROM

      # Reads the body to its end, yielding each piece (decoded), and hands the connection back.
      # @param raw [String, nil] the buffer raw pieces are read into (nil: a new String each)
      def pump(raw)
        # (A block that closed the response has handed the connection back: nothing to read.)
        while (hold = @hold) && (piece = hold.read(raw))
          if @inflater
            inflate(piece) { |chunk| yield chunk unless chunk.empty? }
          elsif !piece.empty?
            yield piece
          end
        end
        tail = @inflater && @inflated ? finish_inflate : nil
        @done = true
        release(true)
        close_inflater
        yield tail if tail && !tail.empty?
      end

      # Hands the connection back: to the pool when the body was read to its end, to be closed
      # otherwise. Should that be cut short (a deadline raised while it waited for the pool's
      # lock), the connection is retired instead, so that it is never left in limbo.
      def release(complete)
        hold = @hold or return
        @hold = nil
        released = false
        begin
          hold.finish(complete)
          released = true
        ensure
          hold.finish(false) unless released
        end
      end

      def check_length(limit)
        too_large(limit, "#{@length} bytes by its Content-Length") if @length > limit
      end

      def too_large(limit, size)
        close
        raise BodyTooLarge, "the response body from #{@request.origin} is #{size}, over max_body_size (#{limit} bytes)"
      end

      def inflater_for(coding)
        case coding&.strip&.downcase
        when "gzip", "x-gzip" then Zlib::Inflate.new(Zlib::MAX_WBITS + 32)
        when "deflate" then DeflateInflater.new
        end
      end

      # Yields the inflated output piece by piece (at most 16 KiB each), so a small compressed
      # body that inflates to gigabytes is stopped by the caller's limit before it is in memory.
      def inflate(raw, &block)
        @inflated = true
        @inflater.inflate(raw, &block)
      rescue Zlib::Error => e
        raise MalformedResponse, "#{@headers['content-encoding'] || 'compressed'} body does not inflate: #{e.message}"
      end

      def finish_inflate
        @inflater.finish
      rescue Zlib::Error => e
        raise MalformedResponse, "compressed body is truncated or corrupt: #{e.message}"
      end

      def close_inflater
        @inflater&.close
      rescue Zlib::Error
        nil
      ensure
        @inflater = nil
      end

      # "deflate" is meant to be zlib-wrapped (RFC 9110 §8.4.1.2), but some servers send raw
      # deflate; the first bytes tell which.
      class DeflateInflater
        def initialize
          @inflate = nil
        end

        def inflate(data, &block)
          @inflate ||= Zlib::Inflate.new(zlib_header?(data) ? Zlib::MAX_WBITS : -Zlib::MAX_WBITS)
          @inflate.inflate(data, &block)
        end

        def finish
          @inflate ? @inflate.finish : ""
        end

        def close
          @inflate&.close
        rescue Zlib::Error
          nil
        end

        private

        def zlib_header?(data)
          return true if data.bytesize < 2
          cmf, flg = data.getbyte(0), data.getbyte(1)
          (cmf & 0x0f) == 8 && ((cmf << 8) | flg) % 31 == 0
        end
      end
      private_constant :DeflateInflater
    end
  end
end
