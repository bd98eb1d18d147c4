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
      # @param reader [#call, nil] returns the next raw piece of body or nil at its end
      # @param finish [#call] called with true once the body is read to the end, with false
      #   when it is abandoned (the connection must then be closed)
      # @param decode [Boolean] inflate gzip/deflate bodies (the client asked for them)
      def initialize(head, request, reader, finish, decode:)
        @status = head.status
        @reason = head.reason
        @request = request
        @reader = reader
        @finish = finish
        @headers = Headers.new(head.headers)
        @inflater = decode ? inflater_for(@headers["content-encoding"]) : nil
        # The decoded body has neither the coding nor the length the server sent.
        @headers = @headers.without("content-encoding", "content-length") if @inflater
        @inflated = false
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
      # once; afterwards the body is gone (unless #body read it first).
      # @yieldparam chunk [String] binary
      # @return [self]
      def each_chunk
        return enum_for(:each_chunk) unless block_given?
        if @body
          yield @body unless @body.empty?
          return self
        end
        raise Weft::Error, "the body was already read, or the response closed" if @done

        begin
          while (piece = next_piece)
            yield piece unless piece.empty?
          end
        ensure
          close
        end
        self
      end
      alias read_body each_chunk

      # The whole body (read now if it was not yet).
      # @return [String] binary
      def body
        return @body if @body
        raise Weft::Error, "the body was already consumed by #each_chunk, or the response closed" if @done
        buffer = String.new(encoding: Encoding::BINARY)
        each_chunk { |chunk| buffer << chunk }
        @body = buffer
      end
      alias read body

      # Ends the response. If the body was not read to its end, the connection is closed (it
      # holds unread bytes); otherwise it has already gone back to the pool. Idempotent.
      def close
        return if @done
        @done = true
        @finish.call(false)
        @reader = nil
        close_inflater
      end

      # @return [Boolean] whether the body was read or the response closed
      def closed?
        @done
      end

      def inspect
        "#<#{self.class.name} #{@status} #{@reason}>"
      end

      private

      def next_piece
        return nil if @done
        loop do
          raw = @reader.call
          if raw.nil?
            tail = @inflater && @inflated ? finish_inflate : nil
            @done = true
            @reader = nil
            @finish.call(true)
            close_inflater
            return tail && !tail.empty? ? tail : nil
          end
          return raw unless @inflater
          piece = inflate(raw)
          return piece unless piece.empty?
        end
      end

      def inflater_for(coding)
        case coding&.strip&.downcase
        when "gzip", "x-gzip" then Zlib::Inflate.new(Zlib::MAX_WBITS + 32)
        when "deflate" then DeflateInflater.new
        end
      end

      def inflate(raw)
        @inflated = true
        @inflater.inflate(raw)
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

        def inflate(data)
          @inflate ||= Zlib::Inflate.new(zlib_header?(data) ? Zlib::MAX_WBITS : -Zlib::MAX_WBITS)
          @inflate.inflate(data)
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
