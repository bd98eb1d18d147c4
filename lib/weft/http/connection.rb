# frozen_string_literal: true

require_relative "../http1/parser"
require_relative "../stream"
require_relative "../timers"
require_relative "errors"

module Weft
  module HTTP
    # One HTTP/1.1 connection (TCP, TLS or unix socket) and the protocol state of the exchange
    # running on it: it writes a request, parses the response head with the server's parser
    # (Weft::HTTP1::ResponseParser) and hands out the body in pieces.
    #
    # The bytes go through a Weft::Stream, whose waits the request's Budget bounds, so it behaves
    # the same in a reactor (the wait parks the fiber) and in a plain thread. Reads go into
    # buffers kept for the connection's life (or the caller's), not a new String per read; a
    # broken connection (Weft::ConnectionLost) is reported as ConnectionReset, or Stale when the
    # request may be sent again.
    class Connection
      READ_SIZE = 65_536
      # A response head; `framing` is :none, :length, :chunked or :close, and `length` the body's
      # length when framing is :length (nil otherwise: the Content-Length of an answer to HEAD, or
      # of a 304, describes a body that is not sent).
      Head = Struct.new(:status, :reason, :version, :headers, :keep_alive, :framing, :length)

      # Raised when a connection that served earlier requests fails before any byte of the
      # response arrived: the peer closed it while idle. The client may send the request again.
      class Stale < ConnectionReset; end

      # @return [Origin]
      attr_reader :origin
      # @return [Integer] requests sent on this connection
      attr_reader :requests

      # @param stream [Weft::Stream] connected (and handshaken), reading READ_SIZE at a time
      # @param origin [Origin]
      # @param proxied [Boolean] requests go to an HTTP proxy (absolute-form targets)
      # @param proxy_headers [Array<Array(String, String)>] fields for the proxy (credentials)
      def initialize(stream, origin, proxied: false, proxy_headers: [])
        @stream = stream
        @origin = origin
        @proxied = proxied
        @proxy_headers = proxy_headers
        @parser = HTTP1::ResponseParser.new
        @requests = 0
        @state = :idle
        @closed = false
      end

      # @return [Boolean]
      def reused?
        @requests > 1
      end

      # @return [Boolean] whether the connection may carry another request: idle, open, the last
      #   response allowed keep-alive and nothing unexpected is buffered
      def reusable?
        @state == :idle && !@closed && @keep_alive && !@close_requested && @stream.buffer.empty?
      end

      # A cheap check made before an idle connection is reused: the peer has not closed it or
      # sent anything unasked for (a response nobody asked for would be taken for the answer to
      # the next request). Peeks without blocking or consuming (Weft::Stream#peek).
      def healthy?
        reusable? && within_idle_hint? && @stream.peek == :none
      end

      # Sends a request: head and body.
      # @param request [Request]
      # @param budget [Budget]
      # @param extra [Array<Array(String, String)>] fields the client adds
      def write_request(request, budget, extra)
        raise Weft::UsageError, "connection busy (#{@state})" unless @state == :idle
        @requests += 1
        @state = :writing
        @received = false
        @close_requested = request.closes_connection?
        extra += @proxy_headers if @proxied
        head = request.head(@proxied, extra)
        length = request.body_length
        if length && length <= 16_384 && request.body.is_a?(String) && request.body.bytesize == length
          write(head << request.body.b, budget) # one segment for the common small request
        elsif length
          write(head, budget)
          sent = 0
          request.each_body_piece do |piece|
            sent += piece.bytesize
            raise ArgumentError, "the request body is longer than its length, #{length}" if sent > length
            write(piece, budget)
          end
          raise ArgumentError, "the request body ended after #{sent} of #{length} bytes" if sent < length
        else
          write(head, budget)
          request.each_body_piece { |piece| write("#{piece.bytesize.to_s(16)}\r\n#{piece}\r\n", budget) }
          write("0\r\n\r\n", budget)
        end
        @state = :sent
        budget.start(:header)
      rescue ConnectionReset
        raise if @state != :writing
        # The server stopped reading, and may have said why first (413, 401...): read_head
        # reports that response if it arrived, or the same failure if not. The connection
        # cannot be reused either way.
        @state = :sent
        @close_requested = true
        budget.start(:header)
      end

      # Reads the response head, skipping interim (1xx) responses.
      # @param method [String] the request's method (HEAD responses have no body)
      # @return [Head]
      def read_head(method, budget)
        # Loops, not Kernel#loop: a return from inside a block is a throw that unwinds the
        # block's frame (through Kernel#loop's C frame on Ruby 3.1), on every request.
        while true # rubocop:disable Style/InfiniteLoop
          until (count = parse_head)
            fill(budget) or raise closed_error("before the response head was complete")
          end
          @stream.consume(count)
          status = @parser.status
          break unless status >= 100 && status < 200 && status != 101
        end
        budget.start(:body)
        start_body(method, status)
      end

      # Reads the next piece of the body.
      # @param into [String, nil] a buffer for the piece (its content is replaced), or nil for a
      #   new String
      # @return [String, nil] the piece (`into`, when given), or nil once the body is complete
      # @raise [ResponseDesync] when the body ends with another response behind it on a reused
      #   connection
      def read_body(budget, into = nil)
        case @framing
        when :length then read_length(budget, into)
        when :chunked then read_chunked(budget, into)
        when :close then read_until_close(budget, into)
        else finish_body
        end
      end

      # Closes the socket (for TLS without waiting for the peer's close_notify).
      def close
        return if @closed
        @closed = true
        @state = :closed
        @stream.close
      end

      # @return [Boolean]
      def closed?
        @closed
      end

      # How long a connection may sit idle before a request on it races the server's own close,
      # from the response's `Keep-Alive: timeout=N` (RFC 9112 leaves the field to HTTP/1.0's
      # usage; Node, Apache and others send it): a second less than the server's N, or half of
      # it below two seconds, so that a request is not written as the server closes (an
      # idempotent one would be sent again, a POST would fail). Nil without the hint: the
      # client's idle_timeout alone decides.
      # @param headers [Array<Array(String, String)>] the response's fields
      # @return [Float, nil] seconds
      def self.idle_limit(headers)
        headers.each do |name, value|
          next unless name.casecmp("keep-alive").zero?
          seconds = value[/(?:\A|[\s,])timeout\s*=\s*"?(\d+)/i, 1] or return nil
          seconds = Integer(seconds, 10)
          return seconds >= 2 ? seconds - 1.0 : seconds / 2.0
        end
        nil
      end

      private

      # Whether the connection has been idle less than the server's Keep-Alive hint allows
      # (Connection.idle_limit).
      def within_idle_hint?
        @idle_limit.nil? || Timers.now - @idle_since < @idle_limit
      end

      def parse_head
        @parser.parse(@stream.buffer)
      rescue HTTP1::ParseError => e
        raise MalformedResponse, "malformed response from #{@origin}: #{e.message}"
      end

      def start_body(method, status)
        @keep_alive = @parser.keep_alive?
        @idle_limit = @keep_alive ? Connection.idle_limit(@parser.headers) : nil
        length = @parser.content_length
        @keep_alive = false if status == 101 # the connection now speaks another protocol
        framing =
          if method == "HEAD" || status == 204 || status == 304 || status == 101
            :none
          elsif @parser.chunked?
            @decoder ||= HTTP1::ChunkedDecoder.new
            @decoder.reset
            :chunked
          elsif length
            @remaining = length
            :length
          else
            @keep_alive = false # the body ends when the server closes the connection
            :close
          end
        @framing = framing
        @state = :body
        Head.new(status, @parser.reason, @parser.http_minor, @parser.headers, @keep_alive, framing,
                 framing == :length ? length : nil)
      end

      def read_length(budget, into)
        return finish_body if @remaining.zero?
        piece = read_socket([@remaining, READ_SIZE].min, budget, into)
        raise closed_error("after #{@parser.content_length - @remaining} of #{@parser.content_length} body bytes") unless piece
        @remaining -= piece.bytesize
        piece
      end

      def read_chunked(budget, into)
        output = into ? into.clear : String.new(encoding: Encoding::BINARY)
        until (done = decode_chunks(output)) || !output.empty?
          fill(budget) or raise closed_error("in the middle of a chunked body")
        end
        return output unless done
        @framing = :none
        output.empty? ? finish_body : output
      end

      # @return [Boolean] whether the last chunk (and the trailer) has been decoded
      def decode_chunks(output)
        @decoder.decode(@stream.buffer, output)
      rescue HTTP1::ParseError => e
        raise MalformedResponse, "malformed chunked body from #{@origin}: #{e.message}"
      end

      def read_until_close(budget, into)
        read_socket(READ_SIZE, budget, into) || finish_body
      end

      def finish_body
        @framing = nil
        @state = :idle
        @idle_since = Timers.now if @idle_limit
        look_behind if @keep_alive && !@close_requested
        nil
      end

      # A complete response must be the last thing the server sent. Bytes behind it were not
      # asked for, so the connection is not reused, whatever they are. When the connection had
      # served earlier requests and they are another response, the exchange itself is in doubt:
      # a server that answered once too often (a stray reply to an earlier request) shifts every
      # later answer by one, so this response may belong to the request before. It is not
      # handed out. A non-blocking read also notices a server that closed the connection.
      def look_behind
        # A read that finds nothing, the normal case, leaves the connection reusable; nil is a
        # server that closed it.
        return if @stream.buffer.empty? && @stream.fill_now == false
        @keep_alive = false
        buffer = @stream.buffer
        stray = buffer.byteslice(0, 16).sub(/\A[\r\n]+/n, "")
        return unless reused? && !stray.empty? && (stray.start_with?("HTTP/") || "HTTP/".start_with?(stray))

        raise ResponseDesync, "#{@origin} sent another response right behind this one on a reused connection: " \
                              "its responses are out of step with the requests (the server answered something it " \
                              "was not asked), so this one may answer an earlier request"
      rescue Weft::ConnectionLost
        @keep_alive = false
      end

      # Appends what the socket has to the buffer.
      # @return [Integer, nil] bytes read, nil at end of stream
      def fill(budget)
        count = @stream.fill(budget)
        @received = true if count
        count
      rescue Weft::ConnectionLost => e
        raise closed_error("(#{e.message})")
      end

      # Bytes already buffered first, then the socket's.
      # @param into [String, nil] a buffer to read into (returned), or nil for a new String
      # @return [String, nil] up to `size` bytes, nil at end of stream
      def read_socket(size, budget, into = nil)
        piece = @stream.read_partial(size, into, budget)
        @received = true if piece
        piece
      rescue Weft::ConnectionLost => e
        raise closed_error("(#{e.message})")
      end

      def write(data, budget)
        @stream.write(data, budget)
      rescue Weft::ConnectionLost => e
        raise closed_error("while sending the request (#{e.message})")
      end

      # The error for a connection that ended early: Stale (retryable) when a reused
      # connection failed before the response began, ConnectionReset otherwise.
      def closed_error(detail)
        if reused? && !@received && @state != :body
          Stale.new("#{@origin} closed a reused keep-alive connection #{detail}")
        else
          ConnectionReset.new("#{@origin} closed the connection #{detail}")
        end
      end
    end
  end
end
