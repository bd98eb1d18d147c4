# frozen_string_literal: true

require "uri"
require_relative "origin"
require_relative "../version"

module Weft
  module HTTP
    # One request as the client sends it: method, URL, header fields and an optional body.
    #
    # A body is a String, an IO-like object (anything with #read(length)) or an Enumerable of
    # Strings. Its length is sent as Content-Length when known (a String, a File, a StringIO,
    # anything with #size); otherwise it goes out with chunked transfer coding.
    class Request
      IDEMPOTENT = %w[GET HEAD PUT DELETE OPTIONS TRACE].freeze
      # Fields a redirect to another origin must not carry along (credentials for the first one).
      CREDENTIALS = %w[authorization cookie proxy-authorization].freeze
      # Fields describing a body, dropped when a redirect turns the request into a bodiless GET.
      BODY_FIELDS = %w[content-length content-type content-encoding transfer-encoding].freeze
      USER_AGENT = "weft/#{Weft::VERSION}"
      # Methods that carry a body, which say "Content-Length: 0" even without one.
      BODY_METHODS = %w[POST PUT PATCH].freeze
      # The common methods as callers give them (Client#get passes "get"), mapped to their
      # canonical names, so that a request does not make and check a new upper-case String.
      METHODS = %w[GET HEAD POST PUT PATCH DELETE OPTIONS TRACE].each_with_object({}) do |name, table|
        [name, name.downcase, name.to_sym, name.downcase.to_sym].each { |given| table[given] = name }
      end.freeze
      NO_FIELDS = [].freeze
      private_constant :BODY_METHODS, :METHODS, :NO_FIELDS

      # @return [String] upper case
      attr_reader :method
      # @return [Origin]
      attr_reader :origin
      # @return [String] path and query, as on the request line
      attr_reader :target
      # @return [Array<Array(String, String)>] field name/value pairs as given
      attr_reader :headers
      # @return [String, #read, Enumerable, nil]
      attr_reader :body

      # Validates header fields and turns them into name/value String pairs.
      # @param headers [Hash, Array<Array>, nil]
      # @return [Array<Array(String, String)>]
      # @raise [ArgumentError] for a name that is not a token or a value with CR, LF or NUL
      def self.fields(headers)
        return [] if headers.nil?
        headers.map do |name, value|
          name = name.to_s
          value = value.is_a?(Array) ? value.join(", ") : value.to_s
          raise ArgumentError, "invalid header field name #{name.inspect}" unless name.match?(/\A[!#$%&'*+\-.^_`|~0-9A-Za-z]+\z/)
          value = value.b
          raise ArgumentError, "invalid value for header #{name}: #{value.inspect}" if value.match?(/[\r\n\x00]/n)
          [name, value]
        end
      end

      # @param method [String, Symbol]
      # @param origin [Origin]
      # @param target [String] path and query
      # @param headers [Hash, Array<Array>, nil]
      # @param body [String, #read, Enumerable, nil]
      # (Positional, not keywords: a keyword to Class#new, a C method, costs Hashes per request.)
      def initialize(method, origin, target, headers = nil, body = nil)
        unless (@method = METHODS[method])
          @method = method.to_s.upcase
          raise ArgumentError, "invalid HTTP method #{method.inspect}" unless @method.match?(/\A[!#$%&'*+\-.^_`|~0-9A-Z]+\z/)
        end
        unless target.start_with?("/") && target.ascii_only? && !target.match?(/[\s\x00-\x1f\x7f]/)
          raise ArgumentError, "invalid request target #{target.inspect} (percent-encode spaces and non-ASCII)"
        end
        @origin = origin
        @target = target
        @headers = Request.fields(headers)
        @body = body
        check_declared_length
        @body_start = body.respond_to?(:pos) ? safe_pos(body) : nil
      end

      # @return [String] the URL, for messages and redirects
      def url
        "#{@origin}#{@target}"
      end

      # @return [String, nil] the value of a field the caller set (case-insensitive; the first,
      #   if it was given more than once)
      def [](name)
        name = name.to_s
        # A scan rather than an index of lower-cased names: a request has few fields, and it
        # is asked for several that it does not have (host, user-agent, content-length...).
        # #casecmp, not #casecmp?, which folds a copy of both Strings (see Headers#[]).
        @headers.find { |field, _| field.casecmp(name) == 0 }&.last
      end

      # @return [Boolean] whether the caller asked for the connection to close after this
      #   request (Connection: close)
      def closes_connection?
        value = self["connection"]
        !value.nil? && value.split(",").any? { |token| token.strip.casecmp?("close") }
      end

      # Whether the request may be sent again after a stale connection failed it: the method is
      # idempotent and the body can be replayed.
      def retryable?
        IDEMPOTENT.include?(@method) && replayable?
      end

      # @return [Boolean] whether the body can be sent a second time
      def replayable?
        @body.nil? || @body.is_a?(String) || @body.is_a?(Array) || (!@body_start.nil? && @body.respond_to?(:seek))
      end

      # Puts an IO body back to where it started, before sending the request again.
      def rewind
        @body.seek(@body_start) if @body_start && @body.respond_to?(:seek)
      end

      # The head as sent on the wire.
      # @param absolute [Boolean] use the absolute URL as the target (requests to a proxy)
      # @param extra [Array<Array(String, String)>] fields added by the client (defaults)
      # @return [String] binary, through the blank line
      def head(absolute = false, extra = NO_FIELDS)
        head = String.new # binary; a keyword (capacity:) would cost a Hash per request
        head << @method << " "
        head << @origin.to_s if absolute
        head << @target << " HTTP/1.1\r\n"
        head << "Host: " << @origin.host_header << "\r\n" unless self["host"]
        @headers.each { |name, value| head << name << ": " << value << "\r\n" }
        extra.each { |name, value| head << name << ": " << value << "\r\n" }
        if (length = body_length)
          head << "Content-Length: #{length}\r\n" unless self["content-length"] || (length.zero? && !sends_empty_length?)
        elsif @body
          head << "Transfer-Encoding: chunked\r\n" unless self["transfer-encoding"]
        end
        head << "\r\n"
      end

      # @return [Integer, nil] the body's length if known up front (0 without a body); nil
      #   means it goes out chunked. A Content-Length or Transfer-Encoding set by the caller wins.
      def body_length
        return nil if self["transfer-encoding"]
        return Integer(self["content-length"], 10) if self["content-length"]
        case @body
        when nil then 0
        when String then @body.bytesize
        when Array then @body.sum(&:bytesize)
        else io_length
        end
      end

      # Yields the body in pieces of at most `size` bytes.
      def each_body_piece(size = 65_536, &block)
        case @body
        when nil then nil
        when String then yield @body unless @body.empty?
        else
          if @body.respond_to?(:read) && @body.method(:read).arity == 1
            # #read(length) and no buffer argument, which the class comment allows: a String
            # per piece (it raised ArgumentError, given two arguments)
            while (piece = @body.read(size))
              yield piece unless piece.empty?
            end
          elsif @body.respond_to?(:read)
            buffer = String.new(capacity: size)
            while @body.read(size, buffer)
              yield buffer unless buffer.empty?
            end
          else
            @body.each { |piece| yield piece.to_s unless piece.to_s.empty? }
          end
        end
      end

      # The request to send after a redirect to `location`, or nil when it cannot be followed
      # (a body that cannot be replayed for 307/308).
      # @param status [Integer]
      # @param location [String]
      # @return [Request, nil]
      def redirect(status, location)
        uri = URI.join(url_for_join, location)
        relative = !location.match?(/\A[a-z][a-z0-9+.-]*:/i)
        origin = relative ? @origin : Origin.from_uri(uri)
        target = uri.path.empty? ? "/" : uri.path
        target += "?#{uri.query}" if uri.query
        method = @method
        body = @body
        headers = @headers
        if status == 303 && method != "HEAD" || [301, 302].include?(status) && method == "POST"
          method = "GET"
          body = nil
          headers = headers.reject { |name, _| BODY_FIELDS.include?(name.downcase) }
        elsif body && !replayable?
          return nil
        end
        rewind if body
        headers = headers.reject { |name, _| CREDENTIALS.include?(name.downcase) } unless origin == @origin
        headers = headers.reject { |name, _| name.casecmp?("host") }
        Request.new(method, origin, target, headers, body)
      end

      private

      # Bodiless requests of methods that normally carry one still say "Content-Length: 0", as
      # some servers (and proxies) answer 411 otherwise.
      def sends_empty_length?
        BODY_METHODS.include?(@method) || !@body.nil?
      end

      def url_for_join
        @origin.unix? ? "http://localhost#{@target}" : url
      end

      # The framing fields a caller set: a Content-Length that is a number and matches a String
      # body, and a Transfer-Encoding that ends in chunked (the client frames such a body in
      # chunks) and comes without a Content-Length. Both on the wire, or a coding other than
      # chunked last, is a request that servers and the proxies in between may frame
      # differently (RFC 9112 6.1 and 6.3; a smuggling shape): refused before anything is sent.
      def check_declared_length
        declared = self["content-length"]
        if (coding = self["transfer-encoding"])
          raise ArgumentError, "both Content-Length and Transfer-Encoding set: a request has one framing (RFC 9112 6.3)" if declared
          unless coding.split(",").last.to_s.strip.casecmp?("chunked")
            raise ArgumentError, "Transfer-Encoding #{coding.inspect} must end with chunked (the client sends the body in chunks)"
          end
        end
        return unless declared
        raise ArgumentError, "invalid Content-Length #{declared.inspect}" unless declared.match?(/\A\d+\z/)
        return unless @body.is_a?(String) && @body.bytesize != Integer(declared, 10)
        raise ArgumentError, "Content-Length #{declared} does not match the body's #{@body.bytesize} bytes"
      end

      def io_length
        return nil unless @body.respond_to?(:read) && @body.respond_to?(:size)
        size = @body.size
        size && size - (@body_start || 0)
      rescue StandardError # a pipe or socket has no size
        nil
      end

      def safe_pos(io)
        io.pos
      rescue StandardError
        nil
      end
    end
  end
end
