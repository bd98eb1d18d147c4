# frozen_string_literal: true

require_relative "circuit_breaker"

module Weft
  module Resilience
    # The circuit breakers an HTTP integration puts in front of the origins it calls (Weft's HTTP
    # client with `breaker:`, the Faraday middleware): one breaker given for every origin, or one
    # per origin, made on first use and kept in CircuitBreaker's registry under "KIND ORIGIN" for
    # the whole process, so that every client of a failing origin sees its breaker open and the
    # server's statistics list it. The registry decides: a breaker unregistered, or replaced by
    # one registered under the same name, is dropped here at the next call.
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
        @registry_version = CircuitBreaker.registry_version
      end

      # Runs the block (a request to `origin`, returning a response with #status) through the
      # origin's breaker.
      # @param origin [#to_s] "scheme://host:port" (or a unix socket URL)
      # @param deadline [Deadline, nil] the request's own deadline, which bounds the breaker's
      #   rate limit and bulkhead waits too (see CircuitBreaker#call)
      # @return the block's value
      # @raise [Weft::Rejected] when the breaker (CircuitOpen) or one of its guards (RateLimited,
      #   BulkheadFull) refuses the call; the block is not run
      def call(origin, deadline: nil, &block)
        breaker_for(origin).call(failed_if: @failed_if, deadline: deadline, &block)
      end

      # @param origin [#to_s]
      # @return [CircuitBreaker] the breaker in front of `origin`
      def breaker_for(origin)
        return @shared if @shared
        # The registry is the breakers' home: one unregistered (or replaced under its name) since
        # they were cached is not used, nor kept alive, any more. Read before the lookup, so a
        # change made meanwhile is seen at the next call. A new Hash rather than #clear: another
        # thread may be reading the old one.
        version = CircuitBreaker.registry_version
        unless version == @registry_version
          @by_origin = {}
          @registry_version = version
        end
        # A race between two fibers or threads finds the same breaker in the registry.
        # Keyed by the String: an object key with its own #hash (HTTP::Origin) costs a recursion
        # guard per lookup (see HTTP::Client#initialize).
        @by_origin[origin.to_s] ||= CircuitBreaker.for("#{@kind} #{origin}", **@options)
      end
    end
  end
end
