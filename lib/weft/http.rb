# frozen_string_literal: true

require_relative "../weft"
require_relative "http/errors"
require_relative "http/client"

module Weft
  # Weft's HTTP client. See Weft::HTTP::Client and docs/http_client.md.
  #
  #   require "weft/http"
  #   client = Weft::HTTP::Client.new("https://api.example.com")
  #   client.get("/status").body
  module HTTP
  end
end

# With Faraday loaded, `f.adapter :weft` works without requiring the adapter explicitly.
if defined?(Faraday::Adapter) && Faraday::Adapter.respond_to?(:register_middleware)
  Faraday::Adapter.register_middleware(weft: lambda {
    require_relative "http/faraday"
    Weft::HTTP::FaradayAdapter
  })
end
