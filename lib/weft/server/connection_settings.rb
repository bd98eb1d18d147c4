# frozen_string_literal: true

module Weft
  class Server
    # The settings a Connection reads (timeouts, linger, the parser's and the body's limits),
    # copied out of the Config once per server into a frozen Struct: they are read on every
    # request, and a Struct member is cheaper than the Config's Hash lookup.
    #
    #   settings = ConnectionSettings.from(config)
    #   settings.idle_timeout # => 20
    ConnectionSettings = Struct.new(:first_data_timeout, :idle_timeout, :header_timeout, :write_timeout, :linger,
                                    :max_requests_per_connection, :max_request_line, :max_header_bytes, :max_headers,
                                    :body_timeout, :body_min_rate, :max_body_bytes, :spool_threshold, keyword_init: true) do
      # @param config [Config]
      # @return [ConnectionSettings] frozen
      def self.from(config)
        new(**members.to_h { |key| [key, config[key]] }).freeze
      end
    end
  end
end
