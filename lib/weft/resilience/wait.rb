# frozen_string_literal: true

module Weft
  module Resilience
    # How long a guard (RateLimiter, Bulkhead) may wait for its caller.
    # @api private
    module Wait
      # @param timeout [Numeric, nil] seconds, nil for no bound of its own
      # @return [Numeric, nil] the timeout, validated
      def self.check(timeout, what = "timeout")
        return timeout if timeout.nil? || (timeout.is_a?(Numeric) && timeout >= 0)
        raise ArgumentError, "#{what} must be nil or a number of seconds >= 0 (got #{timeout.inspect})"
      end

      # A wait bounded by `timeout` and by what is left of the caller's Weft.deadline, so that a
      # guard refuses at once a wait the deadline would cut short anyway.
      # @param timeout [Numeric, nil]
      # @return [Numeric] seconds, Float::INFINITY when nothing bounds the wait
      def self.limit(timeout)
        limit = timeout || Float::INFINITY
        remaining = Weft.remaining
        remaining && remaining < limit ? remaining : limit
      end
    end
  end
end
