# frozen_string_literal: true

require "uri"
require "ipaddr"

module Weft
  module HTTP
    # Where requests go: scheme, host and port, or the path of a unix socket. The client keeps
    # one connection pool per origin.
    class Origin
      DEFAULT_PORTS = { "http" => 80, "https" => 443 }.freeze

      # @return [String] "http", "https" or "unix"
      attr_reader :scheme
      # @return [String, nil] host name or IP address (IPv6 without brackets)
      attr_reader :host
      # @return [Integer, nil]
      attr_reader :port
      # @return [String, nil] the unix socket's path
      attr_reader :socket_path

      # @param uri [URI::Generic] an http://, https:// or unix:///path URI
      # @return [Origin]
      # @raise [ArgumentError] for other schemes or a missing host
      def self.from_uri(uri)
        case uri.scheme&.downcase
        when "http", "https"
          raise ArgumentError, "URL #{uri} has no host" if uri.hostname.nil? || uri.hostname.empty?
          new(uri.scheme.downcase, uri.hostname, uri.port || DEFAULT_PORTS.fetch(uri.scheme.downcase), nil)
        when "unix"
          raise ArgumentError, "unix URL #{uri} needs a socket path (unix:///path/to.sock)" if uri.path.to_s.empty?
          new("unix", nil, nil, uri.path)
        else
          raise ArgumentError, "unsupported URL scheme in #{uri} (http, https and unix are)"
        end
      end

      # Use Origin.from_uri, which checks the scheme and host and fills the default port.
      def initialize(scheme, host, port, socket_path)
        @scheme = scheme
        @host = host
        @port = port
        @socket_path = socket_path
        @key = unix? ? "unix:#{socket_path}" : "#{scheme}://#{authority}"
        # Asked for on every request (the Host field) and every connect: worked out once.
        @host_header = build_host_header.freeze
        @ip = !host.nil? && ip_literal?(host)
        freeze
      end

      # @return [Boolean]
      def tls?
        @scheme == "https"
      end

      # @return [Boolean]
      def unix?
        @scheme == "unix"
      end

      # @return [Boolean] whether the host is an IP literal (no DNS, no SNI)
      def ip?
        @ip
      end

      # @return [String] host[:port] as it goes in the Host header (port only if not the default)
      attr_reader :host_header

      # @return [String] host:port, as a CONNECT request names it
      def authority
        "#{@host.include?(':') ? "[#{@host}]" : @host}:#{@port}"
      end

      # @return [String] e.g. "https://example.com:443" or "unix:/run/app.sock"
      def to_s
        @key
      end

      # Origins are equal when they name the same place (the same #to_s), so a pool is found by
      # an Origin built from another URL.
      def ==(other)
        other.is_a?(Origin) && other.to_s == @key
      end
      alias eql? ==

      # @return [Integer] #to_s's hash (Origins are Hash keys)
      def hash
        @key.hash
      end

      private

      def build_host_header
        return "localhost" if unix?
        host = @host.include?(":") ? "[#{@host}]" : @host
        @port == DEFAULT_PORTS[@scheme] ? host : "#{host}:#{@port}"
      end

      # Names that cannot be IP literals are told apart without IPAddr's exception.
      def ip_literal?(host)
        return false unless host.include?(":") || host.match?(/\A[\d.]+\z/)
        IPAddr.new(host)
        true
      rescue IPAddr::Error
        false
      end
    end
  end
end
