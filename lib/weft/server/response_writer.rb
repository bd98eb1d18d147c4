# frozen_string_literal: true

require "rack/utils"
require_relative "../http1/parser"
require_relative "stream"
require_relative "../errors"

module Weft
  class Server
    # Turns a Rack response (status, headers, body) into HTTP/1.1 bytes on a connection.
    #
    # Framing: an Array body (to_ary) gets a Content-Length and goes out with the head in one
    # write; an `each` body of unknown length is sent chunked to HTTP/1.1 clients and
    # close-delimited to HTTP/1.0 ones; a `call` body (Rack 3 streaming) and a partial hijack
    # get the raw connection after the head, which then belongs to the app. Headers may be in
    # Rack 3 form (lowercase names, Array values) or Rack 2 form (any case, "\n"-joined values).
    module ResponseWriter
      # The app's status or headers cannot be sent (nothing was written yet).
      class InvalidResponse < StandardError
        include Weft::Error
      end

      # The body is longer or shorter than the content-length the app declared (found while it
      # is sent, so the head is out): what was sent ends at the declared length at most, and
      # the connection is closed.
      class LengthMismatch < StandardError
        include Weft::Error
      end

      # A body the app chunked itself (transfer-encoding: chunked) is not valid chunked framing,
      # found while it is decoded for an HTTP/1.0 client (the head is out): the connection is
      # closed after what decoded.
      class MalformedChunks < StandardError
        include Weft::Error
      end

      STATUS_LINES = Hash.new do |lines, status|
        reason = Rack::Utils::HTTP_STATUS_CODES[status] || "Status #{status}"
        lines[status] = "HTTP/1.1 #{status} #{reason}\r\n".b.freeze
      end
      CRLF = "\r\n"
      LAST_CHUNK = "0\r\n\r\n"
      CONNECTION_CLOSE = "connection: close\r\n"
      CONNECTION_KEEP_ALIVE = "connection: keep-alive\r\n"
      CHUNKED = "transfer-encoding: chunked\r\n"
      # Joining head and body into one write pays while the body is small.
      COALESCE_LIMIT = 65_536

      TOKEN = /\A[!#$%&'*+\-.^_`|~0-9A-Za-z]+\z/.freeze
      # A value that cannot go on one header line as it is (response splitting, or Rack 2's
      # "\n"-joined values).
      MULTILINE_OR_UNSAFE = /[\r\n\0]/.freeze

      # What each header name means to the writer, keyed by the name as the app spelled it:
      # apps send the same few names over and over, and one lookup replaces lower-casing, five
      # comparisons and a token check per header (:plain, :date, :rack, :hijack,
      # :content_length, :connection, :transfer_encoding, :hop_by_hop or :invalid).
      HEADER_KINDS = {}

      module_function

      # @param keep_alive [Boolean] whether the request allows the connection to stay open
      # @return [Boolean] whether the connection can stay open (what the head said)
      def write(connection, env, status, headers, body, keep_alive)
        # Most responses (a Hash of plain headers, an Array body, a status with a body) are
        # serialized in C in one pass (HTTP1.simple_response); it returns nil for anything
        # else, which #write_any handles. Both produce the same bytes for what C accepts
        # (test/server/response_writer_test.rb compares them).
        if status.is_a?(Integer) && status >= 200 && status <= 999 && status != 204 && status != 304 &&
           env["REQUEST_METHOD"] != "HEAD"
          keep_alive = false if connection.server_stopping?
          connection_line = keep_alive ? (CONNECTION_KEEP_ALIVE if env["SERVER_PROTOCOL"] == "HTTP/1.0") : CONNECTION_CLOSE
          response = HTTP1.simple_response(STATUS_LINES[status], headers, body, connection_line, Server.date_line)
          if response
            connection.write(response)
            return keep_alive
          end
        end
        write_any(connection, env, status, headers, body, keep_alive)
      end

      # Writes any response Rack allows (see #write).
      # @return [Boolean] whether the connection can stay open (what the head said)
      def write_any(connection, env, status, headers, body, keep_alive)
        unless status.is_a?(Integer)
          status = Integer(status) rescue raise(InvalidResponse, "invalid status #{status.inspect}") # rubocop:disable Style/RescueModifier
        end
        raise InvalidResponse, "invalid status #{status}" unless status.between?(100, 999)
        unless headers.is_a?(Hash) || headers.respond_to?(:each)
          raise InvalidResponse, "headers must respond to each, got #{headers.class}"
        end
        unless body.is_a?(Array) || body.respond_to?(:each) || body.respond_to?(:call)
          raise InvalidResponse, "body must respond to each or call, got #{body.class}"
        end
        head_request = env["REQUEST_METHOD"] == "HEAD"
        http10 = env["SERVER_PROTOCOL"] == "HTTP/1.0"
        bodyless = status < 200 || status == 204 || status == 304

        head = STATUS_LINES[status].dup # (String.new with capacity: allocates its keywords' Hash)
        length = nil
        hijack = nil
        dated = false
        app_chunked = false
        headers.each do |name, value|
          name = name.to_s
          case HEADER_KINDS[name] || classify(name)
          when :plain
            if value.is_a?(String) && !MULTILINE_OR_UNSAFE.match?(value)
              head << name << ": " << value << CRLF
            else
              append_header(head, name, value)
            end
          when :date
            dated = true
            append_header(head, name, value)
          when :rack
            next
          when :hijack
            hijack = value
          when :content_length
            # Written once, below, from the parsed value (the app's own line is not copied).
            value = value.first if value.is_a?(Array) && value.size == 1
            raise InvalidResponse, "invalid content-length #{value.inspect}" unless value.to_s.match?(/\A\d+\z/)
            length = value.to_s.to_i unless bodyless
          when :connection
            keep_alive = false if value.to_s.downcase.include?("close")
          when :transfer_encoding
            # Already chunked by the app (Rack 2's Rack::Chunked): passed through untouched to
            # an HTTP/1.1 client. An HTTP/1.0 client knows no chunked coding (RFC 9112 section
            # 6.1): the body is decoded for it and sent close-delimited (#write_dechunked).
            app_chunked = !bodyless && value.to_s.downcase.strip == "chunked"
            append_header(head, name, value) if app_chunked && !http10
          when :hop_by_hop # keep-alive: the server decides about persistence
            next
          else
            raise InvalidResponse, "invalid character in header #{name}"
          end
        end
        head << Server.date_line unless dated

        if hijack || (!bodyless && !body.is_a?(Array) && !body.respond_to?(:each) && body.respond_to?(:call))
          # The app takes over the connection after the head (partial hijack / streaming).
          head << CONNECTION_CLOSE << CRLF
          connection.write(head)
          (hijack || body).call(Stream.new(connection))
          return false
        end

        parts = nil
        if bodyless
          length = nil
        elsif app_chunked
          # The app's chunks frame the body: no content-length beside them (RFC 9112 section
          # 6.2), and an Array body is written as it is.
          length = nil
        elsif length.nil? && (body.is_a?(Array) || body.respond_to?(:to_ary))
          parts = body.to_ary
          length = 0
          parts.each { |part| length += part.bytesize }
          head << (CONTENT_LENGTH_LINES[length] || content_length_line(length))
        elsif length
          head << (CONTENT_LENGTH_LINES[length] || content_length_line(length))
        end
        chunked = !bodyless && length.nil? && !http10 && !head_request && !app_chunked
        # Without a length or chunking, only closing the connection ends the body.
        keep_alive = false if !bodyless && length.nil? && http10 && !head_request
        # Settled now, as the head is written, not when the request arrived: a server that began
        # stopping meanwhile must say so, since it closes the connection after this response.
        keep_alive = false if connection.server_stopping?
        head << CHUNKED if chunked

        if !keep_alive
          head << CONNECTION_CLOSE
        elsif http10
          head << CONNECTION_KEEP_ALIVE
        end
        head << CRLF

        if bodyless || head_request
          connection.write(head)
        elsif parts
          write_parts(connection, head, parts, length)
        elsif chunked
          connection.write(head)
          body.each { |chunk| connection.write("#{chunk.bytesize.to_s(16)}\r\n#{chunk}\r\n") unless chunk.empty? }
          connection.write(LAST_CHUNK)
        elsif app_chunked && http10
          connection.write(head)
          write_dechunked(connection, body)
        else
          connection.write(head)
          write_body(connection, body, length)
        end
        keep_alive
      end

      # Writes an `each` body (an Array one when the app set the content-length itself). With a
      # declared length, nothing goes out past it: the bytes beyond would be read by a client or
      # proxy as the start of the next response on the connection (the head did not say close),
      # which is how an app that passes on an upstream's content-length with a body of another
      # length (decompressed, say) turns into response smuggling. A body of the wrong length
      # raises LengthMismatch once what fits is written, so that RackAdapter logs the app's error
      # and closes the connection.
      # @raise [LengthMismatch]
      def write_body(connection, body, length)
        written = 0
        body.each do |chunk|
          if length && written + chunk.bytesize > length
            connection.write(chunk.byteslice(0, length - written))
            raise LengthMismatch, "the body is longer than its content-length of #{length}"
          end
          written += chunk.bytesize
          connection.write(chunk)
        end
        return if length.nil? || written == length
        raise LengthMismatch, "the body (#{written} bytes) is shorter than its content-length of #{length}"
      end

      # Writes the decoded bytes of a body the app chunked itself, for an HTTP/1.0 client (the
      # connection closes after it, which ends the body). Trailers are dropped, as a 1.0 client
      # could not be sent them either. A body that is not valid chunked framing, or goes on past
      # its last chunk, raises MalformedChunks once what decoded is written: RackAdapter logs it
      # and closes the connection, the client seeing a body cut short.
      # @raise [MalformedChunks]
      def write_dechunked(connection, body)
        decoder = HTTP1::ChunkedDecoder.new
        pending = String.new(encoding: Encoding::BINARY)
        decoded = String.new(encoding: Encoding::BINARY)
        done = false
        body.each do |piece|
          next if piece.empty?
          raise MalformedChunks, "the app's chunked body goes on after its last chunk" if done
          pending << piece
          done = decoder.decode(pending, decoded)
          connection.write(decoded) unless decoded.empty?
          decoded.clear
        end
        raise MalformedChunks, "the app's chunked body ends before its last chunk" unless done
      rescue HTTP1::ParseError => e
        connection.write(decoded) unless decoded.empty?
        raise MalformedChunks, "the app's chunked body is malformed: #{e.message}"
      end

      # @api private: writes the head and the body's parts, as one write while they are small
      # (COALESCE_LIMIT), where one copy costs less than a second syscall
      def write_parts(connection, head, parts, length)
        if length <= COALESCE_LIMIT
          parts.each { |part| head << part }
          connection.write(head)
        else
          connection.write(head)
          parts.each { |part| connection.write(part) }
        end
      end

      # Appends one header; Array values and "\n"-joined values (Rack 2) become several lines.
      # CR, LF and NUL cannot appear in a line (response splitting). The name was checked by
      # #classify.
      def append_header(head, name, value)
        if value.is_a?(Array)
          value.each { |item| append_header(head, name, item) }
        else
          value = value.to_s
          if value.include?("\n")
            value.split("\n").each { |item| append_header(head, name, item) }
          else
            raise InvalidResponse, "invalid character in header #{name}" if value.match?(/[\r\0]/)
            head << name << ": " << value << CRLF
          end
        end
      end

      # @return [Symbol] the kind of header `name` is (see HEADER_KINDS), remembered for the
      #   first 1,000 distinct names
      def classify(name)
        lower = name.downcase
        kind =
          if lower.start_with?("rack.") then lower == "rack.hijack" ? :hijack : :rack
          elsif !TOKEN.match?(name) then :invalid
          else
            HEADER_KIND_BY_LOWER_NAME.fetch(lower, :plain)
          end
        HEADER_KINDS[name.dup.freeze] = kind if HEADER_KINDS.size < 1000
        kind
      end

      HEADER_KIND_BY_LOWER_NAME = {
        "content-length" => :content_length,
        "connection" => :connection,
        "transfer-encoding" => :transfer_encoding,
        "date" => :date,
        "keep-alive" => :hop_by_hop
      }.freeze

      # "content-length: N\r\n" for the lengths seen so far (the first 4,096 distinct ones).
      CONTENT_LENGTH_LINES = {}

      # @api private
      # @return [String] the frozen content-length line for `length`, shared after its first use
      def content_length_line(length)
        line = "content-length: #{length}\r\n".freeze
        CONTENT_LENGTH_LINES[length] = line if CONTENT_LENGTH_LINES.size < 4096
        line
      end

      # A short plain-text response for errors detected by the server itself, which always
      # closes the connection afterwards.
      def write_error(connection, status, message)
        connection.write(error_response(status, message))
      end

      # @return [String] the bytes of such an error response
      def error_response(status, message)
        body = "#{Rack::Utils::HTTP_STATUS_CODES[status]}: #{message}\n"
        "#{STATUS_LINES[status]}content-type: text/plain\r\ncontent-length: #{body.bytesize}\r\n" \
          "connection: close\r\n#{Server.date_line}\r\n#{body}"
      end
    end
  end
end
