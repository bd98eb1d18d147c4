# frozen_string_literal: true

module ActiveRecord
  module ConnectionAdapters
    module WeftPostgreSQL
      # The session settings ActiveRecord's PostgreSQL adapter gives each connection it opens
      # (PostgreSQLAdapter#configure_connection), made once from a database configuration and
      # applied to every real connection of the shared pool as it opens (the pool's on_connect)
      # and again after a session reset. The adapter itself sends none of them: its statements
      # may run on any of the pool's connections, so all of them must be alike.
      #
      # Applied: client_encoding (`encoding:`), client_min_messages (`min_messages:`, default
      # warning), search_path (`schema_search_path:` / `schema_order:`), standard_conforming_strings
      # on, intervalstyle iso_8601, every `variables:` entry, and the time zone ActiveRecord wants
      # (UTC when ActiveRecord.default_timezone is :utc, the server's default otherwise) unless
      # `variables:` names one.
      class SessionSetup
        # @return [Array<String>] the SET statements, in order
        attr_reader :statements
        # @return [String, nil] the client encoding to set, if the configuration names one
        attr_reader :encoding
        # @return [Symbol, nil] the ActiveRecord.default_timezone the session time zone follows
        #   (nil when `variables:` sets the time zone itself)
        attr_reader :default_timezone

        # @param config [Hash{Symbol=>Object}] the database configuration
        # @param default_timezone [Symbol] :utc or :local (ActiveRecord.default_timezone)
        def initialize(config, default_timezone:)
          variables = (config[:variables] || {}).transform_keys(&:to_s)
          @encoding = config[:encoding]&.to_s
          @default_timezone = variables.key?("timezone") ? nil : default_timezone
          @statements = [
            "SET standard_conforming_strings = on", # first: #literal relies on it
            "SET client_min_messages TO #{literal(config[:min_messages] || 'warning')}",
            *search_path(config[:schema_search_path] || config[:schema_order]),
            "SET intervalstyle = iso_8601",
            *variables.filter_map { |name, value| variable(name, value) },
            *timezone,
          ].freeze
          freeze
        end

        # Applies the settings to a new connection.
        # @param raw [PG::Connection]
        # @return [void]
        def call(raw)
          raw.set_client_encoding(@encoding) if @encoding # keeps pg's idea of the encoding in step
          @statements.each { |sql| raw.exec(sql) }
        end

        # @param timezone [Symbol] an ActiveRecord.default_timezone
        # @return [Boolean] whether connections set up here already have the session time zone
        #   ActiveRecord wants for it
        def timezone_for?(timezone)
          @default_timezone.nil? || @default_timezone == timezone
        end

        # Two setups with the same settings may share a pool.
        def eql?(other)
          other.is_a?(SessionSetup) && other.statements == @statements && other.encoding == @encoding
        end
        alias == eql?

        # Equal setups hash alike, so connections set up the same way share one pool (#eql?).
        def hash
          [@statements, @encoding].hash
        end

        private

        # As ActiveRecord's adapter: a comma-separated list of schemas, sent as written.
        def search_path(path)
          path ? ["SET search_path TO #{path}"] : []
        end

        def variable(name, value)
          if value == ":default" || value == :default
            "SET SESSION #{name} TO DEFAULT"
          elsif !value.nil?
            "SET SESSION #{name} TO #{literal(value)}"
          end
        end

        def timezone
          return [] unless @default_timezone
          @default_timezone == :utc ? ["SET SESSION timezone TO 'UTC'"] : ["SET SESSION timezone TO DEFAULT"]
        end

        # A string literal under standard_conforming_strings: quotes doubled, backslashes as they
        # are.
        def literal(value)
          "'#{value.to_s.gsub("'", "''")}'"
        end
      end
    end
  end
end
