# frozen_string_literal: true

require_relative "clock"

module Ringpool
  # The answer for one item of an allocation batch. Immutable; one of:
  #
  #   tracked    a number from the pool, stored, locked out until `locked_until`
  #   overflow   the pool's overflow number (not tracked) and why: exhausted, shard_unavailable,
  #              storage_unavailable
  #   error      the item itself was bad (unknown pool, invalid params...): no number
  #   not_owner  (between shards only) the shard asked does not own the pool
  class Result
    REASONS = %w[exhausted shard_unavailable storage_unavailable].freeze

    # @return [Symbol] :tracked, :overflow, :error or :not_owner
    attr_reader :kind
    # @return [Integer, nil]
    attr_reader :ring_pool
    # @return [String, nil]
    attr_reader :number
    # @return [String, nil] overflow reason, or error code
    attr_reader :reason
    # @return [Integer, nil] microseconds since the epoch (tracked only)
    attr_reader :locked_until
    # @return [String, nil] an error's explanation
    attr_reader :message

    # @return [Result] a stored allocation
    def self.tracked(ring_pool, number, locked_until)
      new(:tracked, ring_pool, number, nil, locked_until, nil)
    end

    # @param pool [RingPool]
    # @param reason [String] one of REASONS
    # @return [Result]
    def self.overflow(pool, reason)
      raise ArgumentError, "unknown overflow reason #{reason.inspect}" unless REASONS.include?(reason)
      new(:overflow, pool.id, pool.overflow_number, reason, nil, nil)
    end

    # @return [Result] a bad item
    def self.error(ring_pool, code, message)
      new(:error, ring_pool, nil, code, nil, message)
    end

    # @return [Result]
    def self.not_owner(ring_pool)
      new(:not_owner, ring_pool, nil, nil, nil, nil)
    end

    # Reads a result a peer shard sent (#to_h's shape).
    # @return [Result, nil] nil when `hash` is not a well-formed result
    def self.from_h(hash)
      return nil unless hash.is_a?(Hash)
      pool = hash["ring_pool"]
      return nil unless pool.is_a?(Integer)
      if hash["not_owner"] == true
        not_owner(pool)
      elsif hash.key?("error")
        error(pool, hash["error"].to_s, hash["message"].to_s)
      elsif hash["overflow"] == true && REASONS.include?(hash["reason"]) && E164.valid?(hash["number"])
        new(:overflow, pool, hash["number"], hash["reason"], nil, nil)
      elsif hash["overflow"] == false && E164.valid?(hash["number"]) && (until_at = Clock.parse(hash["lockout_until"]))
        tracked(pool, hash["number"], until_at)
      end
    end

    def initialize(kind, ring_pool, number, reason, locked_until, message)
      @kind = kind
      @ring_pool = ring_pool
      @number = number
      @reason = reason
      @locked_until = locked_until
      @message = message
      freeze
    end

    # @return [Boolean]
    def tracked?
      @kind == :tracked
    end

    # @return [Boolean]
    def overflow?
      @kind == :overflow
    end

    # @return [Hash] the JSON shape of the API
    def to_h
      case @kind
      when :tracked
        { "ring_pool" => @ring_pool, "number" => @number, "overflow" => false, "lockout_until" => Clock.iso8601(@locked_until) }
      when :overflow
        { "ring_pool" => @ring_pool, "number" => @number, "overflow" => true, "reason" => @reason, "lockout_until" => nil }
      when :error
        { "ring_pool" => @ring_pool, "error" => @reason, "message" => @message }
      else
        { "ring_pool" => @ring_pool, "not_owner" => true }
      end
    end
  end
end
