# frozen_string_literal: true

require "pg"

module Weft
  module Postgres
    # Where and how to connect: the libpq connection parameters a pool opens each connection
    # with, and the server's address as it is named in error messages.
    class Settings
      # Seconds libpq waits for a server to answer a new connection (libpq's connect_timeout).
      DEFAULT_CONNECT_TIMEOUT = 5

      # @return [Hash{Symbol=>String}] the libpq parameters, as given plus Weft's additions
      attr_reader :params
      # @return [String] "host:port" or the socket path, for messages
      attr_reader :address

      # @param target [String, Hash, nil] a `postgres://` URL, a libpq conninfo string
      #   ("host=... dbname=..."), a Hash of libpq parameters, or nil for DATABASE_URL (or, when
      #   that is unset too, libpq's own defaults: PGHOST, PGPORT, PGDATABASE...)
      # @param connect_timeout [Numeric] seconds; libpq counts whole seconds, at least 2
      # @param statement_timeout [Numeric, nil] seconds after which the server cancels a statement
      # @param application_name [String, nil] shown in pg_stat_activity
      def initialize(target = nil, connect_timeout: DEFAULT_CONNECT_TIMEOUT, statement_timeout: nil,
                     application_name: nil)
        target = ENV.fetch("DATABASE_URL", "") if target.nil?
        base = target.is_a?(Hash) ? PG::Connection.connect_hash_to_string(target) : target.to_s
        parsed = PG::Connection.conninfo_parse(base).each_with_object({}) do |option, out|
          out[option[:keyword].to_sym] = option[:val] if option[:val]
        end
        parsed[:connect_timeout] ||= connect_timeout.ceil.to_s if connect_timeout
        parsed[:application_name] ||= application_name if application_name
        if statement_timeout
          milliseconds = (statement_timeout * 1000).round
          parsed[:options] = [parsed[:options], "-c statement_timeout=#{milliseconds}"].compact.join(" ")
        end
        @params = parsed.freeze
        @address = describe(parsed)
      end

      # @return [String] the conninfo string handed to PG.connect
      def conninfo
        PG::Connection.connect_hash_to_string(@params)
      end

      private

      # Names the server the way a person reading a log needs it: host and port, falling back to
      # the environment and libpq's compiled-in defaults exactly as libpq would.
      def describe(params)
        host = params[:host] || params[:hostaddr] || ENV["PGHOST"]
        host = "/var/run/postgresql" if host.nil? || host.empty?
        port = params[:port] || ENV["PGPORT"] || "5432"
        host.start_with?("/") ? "#{host}/.s.PGSQL.#{port}" : "#{host}:#{port}"
      end
    end
  end
end
