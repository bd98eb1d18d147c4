# frozen_string_literal: true

require "faraday"
require_relative "../resilience"

module Weft
  module Resilience
    # A Faraday middleware that puts every request of a connection behind a Weft::CircuitBreaker,
    # whichever adapter sends it (Weft's, Net::HTTP, ...). Opt in with one line:
    #
    #   require "weft/resilience/faraday"
    #
    #   Faraday.new("https://shard-3.internal") do |f|
    #     f.request :weft_breaker, slow_call: 0.2              # a breaker per origin, made for you
    #     f.adapter :weft
    #   end
    #
    #   Faraday.new(url) { |f| f.request :weft_breaker, breaker: SHARD_3 }   # or one of yours
    #
    # A failure is an exception the adapter raises (refused, reset, timed out; the breaker's
    # `failure:` option decides which count) or, by default, a response with a 5xx status: the
    # response still reaches the caller, but the breaker counts it. While the breaker refuses a
    # request, no I/O happens and Weft::CircuitOpen (a Weft::Rejected) is raised, or the
    # `fallback:` is called with it and its answer returned: a Faraday::Response or anything
    # the caller is prepared to get.
    class FaradayBreaker < ::Faraday::Middleware
      # @param app the next middleware
      # @param breaker [CircuitBreaker, nil] the breaker to use; nil uses one per origin (scheme,
      #   host and port) for the whole process, registered as "faraday ORIGIN" and made from the
      #   `breaker_options` of the first connection that needs it (see OriginBreakers)
      # @param failed_statuses [#include?] response statuses that count as failures
      # @param fallback [#call, nil] called with the Weft::Rejected when the breaker refuses
      # @param breaker_options options for the breakers made per origin (see CircuitBreaker.new)
      def initialize(app, breaker: nil, failed_statuses: 500..599, fallback: nil, **breaker_options)
        super(app)
        raise ArgumentError, "fallback must respond to call" unless fallback.nil? || fallback.respond_to?(:call)

        # Faraday builds a middleware per connection; the breaker of an origin is the process's,
        # so every connection to a failing origin sees it open.
        @breakers = OriginBreakers.new("faraday", breaker: breaker, failed_statuses: failed_statuses, **breaker_options)
        @fallback = fallback
      end

      # Sends the request through the breaker.
      # @return [Faraday::Response]
      def call(env)
        url = env.url
        @breakers.call("#{url.scheme}://#{url.host}:#{url.port}") { @app.call(env) }
      rescue Weft::Rejected => e
        raise unless @fallback
        @fallback.call(e)
      end
    end
  end
end

Faraday::Request.register_middleware(weft_breaker: Weft::Resilience::FaradayBreaker)
