# frozen_string_literal: true

require "socket"
require "uri"
require_relative "../errors"

module Weft
  class Server
    # A bind URL taken apart and checked, before any socket exists:
    #
    #   tcp://HOST:PORT                       (HOST may be an IPv6 literal in brackets)
    #   unix:///path/to.sock
    #   ssl://HOST:PORT?cert=PATH&key=PATH    TLS over TCP
    #
    # Checking happens when the URL enters the configuration, so that a typo in a port, an
    # unresolvable host or a missing certificate is reported in one line before the server binds
    # anything (rather than as a backtrace, or a port number silently taken modulo 65,536).
    class BindAddress
      # A URL the server cannot bind. #reason is the message without the URL.
      class Invalid < ArgumentError
        include Weft::Error

        # @return [String]
        attr_reader :url, :reason

        # @param url [String] the bind URL as given
        # @param reason [String] what is wrong with it
        def initialize(url, reason)
          @url = url
          @reason = reason
          super("#{url}: #{reason}")
        end
      end

      TCP_SCHEMES = %w[tcp ssl http https].freeze
      DEFAULT_PORT = 9292

      # @return [String] the URL as given
      attr_reader :url
      # @return [String] "tcp", "ssl", "http", "https" or "unix"
      attr_reader :scheme
      # @return [String, nil] the host to bind (nil for unix)
      attr_reader :host
      # @return [Integer, nil] the port (nil for unix)
      attr_reader :port
      # @return [String, nil] the socket file (unix only)
      attr_reader :path
      # @return [String, nil] ssl:// certificate (chain) and key files
      attr_reader :cert, :key

      # Takes a URL apart without touching the network.
      # @param url [String]
      # @raise [Invalid] when the URL is malformed
      def self.parse(url)
        new(url)
      end

      # Parses and also resolves the host: what configuration checks use.
      # @raise [Invalid] when the URL cannot be bound
      def self.check(url)
        new(url).tap(&:addrinfo)
      end

      # @return [Boolean] whether `number` is a TCP port
      def self.port?(number)
        number.is_a?(Integer) && number.between?(0, 65_535)
      end

      # @return [String] a tcp:// URL for a host and port (IPv6 literals get their brackets)
      def self.tcp_url(host, port)
        host = "[#{host}]" if host.include?(":") && !host.start_with?("[")
        "tcp://#{host}:#{port}"
      end

      # @param url [String] tcp:// (or http://), ssl:// (or https://) with cert= and key=, or
      #   unix:///path
      # @raise [Invalid] when the URL is not a bind address Weft understands
      def initialize(url)
        @url = url
        raise Invalid.new(url, "must be a string") unless url.is_a?(String)
        uri = begin
          URI.parse(url)
        rescue URI::InvalidURIError
          invalid("not a URL (tcp://HOST:PORT, unix:///PATH or ssl://HOST:PORT?cert=..&key=..)")
        end
        @scheme = uri.scheme
        if TCP_SCHEMES.include?(@scheme)
          parse_tcp(uri)
        elsif @scheme == "unix"
          parse_unix(uri)
        else
          invalid("unsupported scheme (tcp://, unix:// or ssl://)")
        end
        freeze
      end

      # @return [Boolean]
      def unix?
        @scheme == "unix"
      end

      # @return [Boolean]
      def ssl?
        @scheme == "ssl" || @scheme == "https"
      end

      # @return [Addrinfo] where to bind: the host resolved (first address), or the socket file
      # @raise [Invalid] when the host does not resolve
      def addrinfo
        return Addrinfo.unix(@path) if unix?
        Addrinfo.getaddrinfo(@host, @port, nil, :STREAM, nil, Socket::AI_PASSIVE).first or
          raise SocketError, "no address"
      rescue SocketError => e
        invalid("cannot resolve host #{@host.inspect} (#{e.message})")
      end

      private

      def invalid(reason)
        raise Invalid.new(@url, reason)
      end

      def parse_tcp(uri)
        @host = uri.hostname.nil? || uri.hostname.empty? ? "0.0.0.0" : uri.hostname
        @port = uri.port || DEFAULT_PORT
        invalid("port #{@port} is out of range (0 to 65535)") unless self.class.port?(@port)
        return unless ssl?

        params = URI.decode_www_form(uri.query.to_s).to_h
        @cert = params["cert"]
        @key = params["key"]
        invalid("ssl:// needs ?cert=PATH&key=PATH") unless @cert && @key
        [@cert, @key].each do |file|
          invalid("cannot read #{file}") unless File.file?(file) && File.readable?(file)
        end
      end

      def parse_unix(uri)
        @path = uri.path.to_s.empty? ? uri.opaque.to_s : uri.path
        invalid("no socket path (unix:///path/to.sock)") if @path.empty?
        directory = File.dirname(File.expand_path(@path))
        invalid("directory #{directory} does not exist") unless File.directory?(directory)
      end
    end
  end
end
