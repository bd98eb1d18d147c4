# frozen_string_literal: true

require_relative "circuit_breaker"

module Weft
  module Resilience
    # The circuit breakers an HTTP integration puts in front of the origins it calls (Weft's HTTP
    # client with `breaker:`, the Faraday middleware): one breaker given for every origin, or one
    # per origin, made on first use and kept in CircuitBreaker's registry under "KIND ORIGIN" for
    # the whole process, so that every client of a failing origin sees its breaker open and the
    # server's statistics list it.
    #
    # A call counts as failed when it raises an exception its breaker counts (the breaker's
    # `failure:` option: by default a StandardError that is not a bug such as a NoMethodError,
    # never a cancellation before the deadline; the HTTP client's per-origin breakers count its
    # own errors and timeouts) or when it returns a response whose status is in
    # `failed_statuses`; such a response still reaches the caller.
    class OriginBreakers
      # @param kind [String] the first word of the per-origin breakers' names ("http", "faraday")
      # @param breaker [CircuitBreaker, nil] the breaker for every origin; nil: one per origin
      # @param failed_statuses [#include?] response statuses counted as failures
      # @param options CircuitBreaker options for the breakers made per origin
      # @raise [ArgumentError] for invalid options (checked now, not at the first call)
      def initialize(kind, breaker: nil, failed_statuses: 500..599, **options)
        raise ArgumentError, "breaker must be a Weft::CircuitBreaker" unless breaker.nil? || breaker.is_a?(CircuitBreaker)
        raise ArgumentError, "failed_statuses must respond to include?" unless failed_statuses.respond_to?(:include?)
        raise ArgumentError, "breaker options are for the breakers made per origin, not with breaker:" if breaker && !options.empty?

        # Built once, so that invalid options fail when the integration is built.
        CircuitBreaker.new("#{kind} options check", register: false, **options) unless breaker
        @kind = kind
        @shared = breaker
        @options = options
        @failed_if = ->(response) { failed_statuses.include?(response.status) }
        @by_origin = {}
      end

      # Runs the block (a request to `origin`, returning a response with #status) through the
      # origin's breaker.
      # @param origin [#to_s] "scheme://host:port" (or a unix socket URL)
      # @return the block's value
      # @raise [Weft::CircuitOpen] when the breaker refuses the call; the block is not run
      def call(origin, &block)
        breaker_for(origin).call(failed_if: @failed_if, &block)
      end

      # @param origin [#to_s]
      # @return [CircuitBreaker] the breaker in front of `origin`
      def breaker_for(origin)
        # A race between two fibers or threads finds the same breaker in the registry.
        # Keyed by the String: an object key with its own #hash (HTTP::Origin) costs a recursion
        # guard per lookup (see HTTP::Client#initialize).
        @shared || (@by_origin[origin.to_s] ||= CircuitBreaker.for("#{@kind} #{origin}", **@options))
      end
    end
  end
end
