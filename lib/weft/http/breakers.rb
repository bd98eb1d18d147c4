# frozen_string_literal: true

module Weft
  module HTTP
    # The circuit breakers a Client puts in front of its origins (the `breaker:` option): one
    # Weft::CircuitBreaker shared by every origin, or one per origin made on first use and kept
    # for the whole process in the breakers' registry (named "http ORIGIN"), so every client of
    # the process sees a failing origin's breaker open.
    #
    # A request counts as failed when it raises an exception the breaker counts (connection
    # refused or reset, a timeout, the deadline; Weft::Cancelled never does) or when its
    # response has a status in `failed_statuses` (5xx by default); such a response still
    # reaches the caller. While a breaker refuses, the request raises Weft::CircuitOpen at once,
    # without connecting. The resilience layer is loaded only by clients that use a breaker.
    class Breakers
      # @param setting [Weft::CircuitBreaker, true, Hash] a breaker for every origin; or one per
      #   origin, made with CircuitBreaker's defaults (true) or with these options (a Hash, which
      #   may also hold `failed_statuses:`, anything that answers #include?)
      # @raise [ArgumentError] for anything else, or invalid breaker options
      def initialize(setting)
        require_relative "../resilience"
        options = setting.is_a?(Hash) ? setting.dup : {}
        statuses = options.delete(:failed_statuses) || (500..599)
        raise ArgumentError, "failed_statuses must respond to include?" unless statuses.respond_to?(:include?)

        @failed_if = ->(response) { statuses.include?(response.status) }
        case setting
        when CircuitBreaker then @shared = setting
        when true, Hash
          # Built once, so that invalid options fail when the client is built.
          CircuitBreaker.new("http options check", register: false, **options)
          @options = options
          @by_origin = {}
        else
          raise ArgumentError, "breaker must be a Weft::CircuitBreaker, true or a Hash of its options (got #{setting.inspect})"
        end
      end

      # Runs the block (a request to `origin`, returning its Response) through the origin's
      # breaker.
      # @param origin [Origin]
      # @return [Response]
      # @raise [Weft::CircuitOpen] when the breaker refuses the request
      def call(origin, &block)
        breaker_for(origin).call(failed_if: @failed_if, &block)
      end

      # @return [Weft::CircuitBreaker] the breaker in front of `origin`
      def breaker_for(origin)
        @shared || (@by_origin[origin] ||= CircuitBreaker.for("http #{origin}", **@options))
      end
    end
  end
end
