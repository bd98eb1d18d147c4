# frozen_string_literal: true

require_relative "../errors"

module Weft
  # Raised (or handed to a fallback) when a guard refuses a call before it starts: the protected
  # code did not run, so nothing was sent anywhere. Rescue this to treat every kind of refusal
  # alike, e.g. to answer with a degraded result.
  class Rejected < StandardError
    include Error
  end

  # A circuit breaker refused the call: it is open, or it is ramping back up and this call was
  # not among the fraction it lets through.
  class CircuitOpen < Rejected
    # @return [String] the breaker's name
    attr_reader :breaker
    # @return [Symbol] :open or :ramping
    attr_reader :state
    # @return [Float, nil] seconds until an open breaker starts ramping; nil while ramping
    attr_reader :retry_after

    # @param breaker [String] the name of the breaker that refused the call
    # @param state [Symbol] its state then (:open or :ramping)
    # @param retry_after [Float, nil] see #retry_after
    def initialize(breaker, state, retry_after = nil)
      @breaker = breaker
      @state = state
      @retry_after = retry_after
      detail = retry_after ? "open, ramping in #{retry_after.round(3)}s" : "ramping, call not admitted"
      super("circuit breaker #{breaker.inspect} #{detail}")
    end
  end

  # A rate limiter had no token for the call within the time it was allowed to wait.
  class RateLimited < Rejected; end

  # A bulkhead had no free slot: its wait queue was full, or no slot freed up in time.
  class BulkheadFull < Rejected; end

  module Resilience
    # Whether `error` is a bug in the calling code rather than a failure of what it called: an
    # exception that is not a StandardError (NoMemoryError, ScriptError, SystemStackError...), or
    # a NameError (NoMethodError included: a typo, a method called on nil). The guards never
    # stand in for one with a fallback or another attempt, and a breaker does not count it
    # (unless its `failure:` says so): a fallback would hide the bug behind degraded answers, and
    # counting it would open the breaker of a healthy dependency.
    # @param error [Exception]
    # @return [Boolean]
    def self.bug?(error)
      !error.is_a?(StandardError) || error.is_a?(NameError)
    end
  end
end
