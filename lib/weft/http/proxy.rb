# frozen_string_literal: true

require "uri"
require "ipaddr"

module Weft
  module HTTP
    # Which HTTP proxy, if any, a request to an origin goes through. Built from the
    # environment the way curl reads it: `http_proxy` (lower case only: under CGI, HTTP_PROXY
    # is a request header), `https_proxy`/`HTTPS_PROXY`, and `no_proxy`/`NO_PROXY` (host
    # names, domain suffixes, IP addresses or CIDR ranges, optional :port, or `*`).
    # Plain-HTTP requests go to the proxy in absolute form; HTTPS goes through a CONNECT tunnel.
    class Proxy
      # A proxy to use: where it listens and the fields that authenticate to it.
      Endpoint = Struct.new(:host, :port, :headers)

      # @param env [Hash] the environment
      # @return [Proxy, nil] nil when no proxy variable is set
      def self.from_env(env = ENV)
        http = env["http_proxy"]
        https = env["https_proxy"] || env["HTTPS_PROXY"]
        return nil if blank?(http) && blank?(https)
        new(http: http, https: https, no_proxy: env["no_proxy"] || env["NO_PROXY"])
      end

      # @api private
      # @return [Boolean] whether a proxy setting is unset or only spaces (`http_proxy=` in the
      #   environment means no proxy)
      def self.blank?(value)
        value.nil? || value.strip.empty?
      end

      # @param http [String, nil] proxy URL for http:// origins
      # @param https [String, nil] proxy URL for https:// origins
      # @param no_proxy [String, nil] comma-separated exceptions
      def initialize(http: nil, https: nil, no_proxy: nil)
        @endpoints = { "http" => endpoint(http), "https" => endpoint(https) }
        @exceptions = (no_proxy || "").split(",").map(&:strip).reject(&:empty?).map(&:downcase)
      end

      # @param origin [Origin]
      # @return [Endpoint, nil]
      def for(origin)
        return nil if origin.unix?
        endpoint = @endpoints[origin.scheme]
        endpoint unless endpoint.nil? || excluded?(origin)
      end

      private

      def endpoint(url)
        return nil if self.class.blank?(url)
        url = "http://#{url}" unless url.include?("://")
        uri = URI.parse(url)
        headers = []
        if uri.user
          credentials = ["#{URI.decode_www_form_component(uri.user)}:#{URI.decode_www_form_component(uri.password.to_s)}"]
          headers << ["Proxy-Authorization", "Basic #{credentials.pack('m0')}"]
        end
        Endpoint.new(uri.hostname, uri.port || 80, headers.freeze).freeze
      rescue URI::InvalidURIError => e
        raise ArgumentError, "invalid proxy URL #{url.inspect}: #{e.message}"
      end

      def excluded?(origin)
        host = origin.host.downcase
        @exceptions.any? do |entry|
          next true if entry == "*"
          name, port = split_port(entry)
          next false if port && port != origin.port
          matches_host?(host, name)
        end
      end

      def split_port(entry)
        return [entry, nil] if entry.count(":") > 1 && !entry.start_with?("[") # bare IPv6
        name, port = entry.split(":", 2)
        [name.delete_prefix("[").delete_suffix("]"), port&.to_i]
      end

      def matches_host?(host, name)
        if name.match?(%r{\A[\d.:a-f/]+\z}) && (range = ip_range(name))
          address = ip_range(host)
          return address ? range.include?(address) : false
        end
        name = name.delete_prefix("*").delete_prefix(".")
        host == name || host.end_with?(".#{name}")
      end

      def ip_range(text)
        IPAddr.new(text)
      rescue IPAddr::Error
        nil
      end
    end
  end
end
