# frozen_string_literal: true

require "json"
require_relative "clock"
require_relative "e164"

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
    # A peer's answer for an item whose pool it does not own (#to_peer).
    NOT_OWNER = "not_owner"

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

    # Reads a result a peer shard sent (#to_peer's shape) for an item of `pool`.
    # @param value [Object] one element of the peer's JSON answer
    # @param pool [RingPool] the item's pool
    # @return [Result, nil] nil when `value` is not a well-formed result
    def self.from_peer(value, pool)
      case value
      when Array
        locked_until, number = value
        tracked(pool.id, number, locked_until) if value.size == 2 && locked_until.is_a?(Integer) && E164.valid?(number)
      when NOT_OWNER then not_owner(pool.id)
      when *REASONS then overflow(pool, value)
      when Hash then error(pool.id, value["error"].to_s, value["message"].to_s) if value.key?("error")
      end
    end

    # Use the constructors above (.tracked, .overflow, .error, .not_owner): they keep the
    # fields consistent with the kind.
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

    # The public answers of tracked and overflow items, written out directly (see #public_json).
    TRACKED_JSON = %({"ring_pool":%d,"number":"%s","overflow":false,"lockout_until":"%s"})
    OVERFLOW_JSON = %({"ring_pool":%d,"number":"%s","overflow":true,"reason":"%s","lockout_until":null})

    # The answer for the item in the public API's JSON (numbers are E.164 and reasons are
    # REASONS: nothing in them needs escaping, so most answers are written out directly, by
    # `format`, which makes only the answer: interpolation makes the id's digits too).
    # @return [String]
    def public_json
      case @kind
      when :tracked then format(TRACKED_JSON, @ring_pool, @number, Clock.iso8601(@locked_until))
      when :overflow then format(OVERFLOW_JSON, @ring_pool, @number, @reason)
      when :error
        JSON.generate({ "ring_pool" => @ring_pool, "error" => @reason, "message" => @message })
      else
        %({"ring_pool":#{@ring_pool},"not_owner":true})
      end
    end

    # JSON.generate's hook: the public answer (#public_json, which the API calls itself: the
    # hook's argument list would make an Array per item).
    # @return [String]
    def to_json(*)
      public_json
    end

    # The answer in the compact shape shards send each other (PeerAPI), read back by
    # Result.from_peer: the item's pool is known to the caller, and so is its overflow number.
    #
    #   [lockout end in microseconds, number]   tracked
    #   "exhausted" (a reason of REASONS)       the overflow number, for that reason
    #   "not_owner"                             not this shard's pool
    #   {"error": code, "message": text}        a bad item
    # @return [Array, String, Hash]
    def to_peer
      case @kind
      when :tracked then [@locked_until, @number]
      when :overflow then @reason
      when :error then { "error" => @reason, "message" => @message }
      else NOT_OWNER
      end
    end
  end
end
