# frozen_string_literal: true

require "json"
require_relative "e164"
require_relative "result"

module Ringpool
  # Checks request bodies before anything else runs. A problem with the request as a whole is
  # an Invalid (the API answers it with its status); a problem with one item of a batch is that
  # item's error Result, and the other items go on.
  module Validation
    # The request as a whole is unacceptable.
    class Invalid < StandardError
      # @return [Integer] the HTTP status to answer with
      attr_reader :status
      # @return [String] a machine-readable code
      attr_reader :code

      # @param status [Integer] the HTTP status to answer with
      # @param code [String] machine-readable code
      # @param message [String] the explanation for a person
      def initialize(status, code, message)
        @status = status
        @code = code
        super(message)
      end
    end

    MAX_ITEMS = 1_000
    MAX_NUMBERS = 500
    MIN_NUMBERS = 2
    MAX_LOCKOUT = 365 * 24 * 3600
    MAX_POOL_ID = 2**31 - 1
    # Params: a flat JSON object of at most MAX_PARAMS keys, scalar values, MAX_PARAMS_BYTES
    # encoded. Tracking parameters are a campaign, a keyword, a page: small.
    MAX_PARAMS = 50
    MAX_KEY_LENGTH = 100
    MAX_VALUE_LENGTH = 1_000
    MAX_PARAMS_BYTES = 4_096
    MAX_NAME_LENGTH = 200
    EMPTY_PARAMS = {}.freeze

    # One checked item of an allocation batch.
    Item = Struct.new(:ring_pool, :params)

    module_function

    # Parses a JSON body.
    # @param body [String]
    # @return [Object]
    # @raise [Invalid] 400 for anything but well-formed UTF-8 JSON
    def parse_json(body)
      text = body.dup.force_encoding(Encoding::UTF_8)
      raise Invalid.new(400, "malformed_json", "the body is not valid UTF-8") unless text.valid_encoding?
      JSON.parse(text, max_nesting: 20)
    rescue JSON::ParserError, JSON::NestingError => e
      raise Invalid.new(400, "malformed_json", "the body is not JSON: #{e.message.lines.first.to_s.strip[0, 200]}")
    end

    # `{"allocations": [{"ring_pool": ID, "params": {...}}, ...]}`, 1 to MAX_ITEMS items.
    # @param body [String]
    # @return [Array<Item, Result>] per item, the checked item or its error
    # @raise [Invalid]
    def allocation_batch(body)
      document = parse_json(body)
      raise Invalid.new(422, "invalid_request", 'expected an object {"allocations": [...]}') unless document.is_a?(Hash)
      items = document["allocations"]
      raise Invalid.new(422, "invalid_request", '"allocations" must be an array') unless items.is_a?(Array)
      unless (1..MAX_ITEMS).cover?(items.size)
        raise Invalid.new(422, "batch_size", "a batch has 1 to #{MAX_ITEMS} allocations, not #{items.size}")
      end
      items.map { |item| allocation_item(item) }
    end

    # @return [Item, Result]
    def allocation_item(item)
      return Result.error(nil, "invalid_item", 'each allocation must be an object {"ring_pool": ID, "params": {...}}') unless item.is_a?(Hash)
      pool = item["ring_pool"]
      unless pool.is_a?(Integer) && pool.between?(1, MAX_POOL_ID)
        return Result.error(nil, "invalid_ring_pool", '"ring_pool" must be a positive integer id')
      end
      params = params_json(item.fetch("params", EMPTY_PARAMS))
      params.is_a?(Array) ? Result.error(pool, *params) : Item.new(pool, params)
    end

    # An item a peer shard sent (PeerAPI): `[ID, {params}]`, its params checked by the shard
    # that took the public request, so only the shape is.
    # @return [Item, Result]
    def peer_item(item)
      pool, params = item
      unless item.is_a?(Array) && item.size == 2 && pool.is_a?(Integer) && params.is_a?(Hash)
        return Result.error(pool.is_a?(Integer) ? pool : nil, "invalid_item", "each item must be [ID, {params}]")
      end
      Item.new(pool, JSON.generate(params))
    end

    # The params as the JSON text to store, or what is wrong with them.
    # @return [String, (String, String)] the text, or an error code and message
    def params_json(params)
      return ["invalid_params", '"params" must be an object'] unless params.is_a?(Hash)
      return ["params_too_large", "at most #{MAX_PARAMS} params"] if params.size > MAX_PARAMS
      params.each do |key, value|
        return ["invalid_params", "param names have 1 to #{MAX_KEY_LENGTH} characters"] unless key.length.between?(1, MAX_KEY_LENGTH)
        return ["invalid_params", "param names must be valid UTF-8 without NUL"] unless storable?(key)
        case value
        when String
          return ["params_too_large", "param #{key[0, 40].inspect} is longer than #{MAX_VALUE_LENGTH} characters"] if value.length > MAX_VALUE_LENGTH
          return ["invalid_params", "param #{key[0, 40].inspect} must be valid UTF-8 without NUL"] unless storable?(value)
        when Integer, true, false, nil then next
        when Float
          next if value.finite?
          return ["invalid_params", "param #{key[0, 40].inspect} is not a finite number"]
        else
          return ["invalid_params", "param #{key[0, 40].inspect} must be a string, number, boolean or null"]
        end
      end
      text = JSON.generate(params)
      return ["params_too_large", "params take more than #{MAX_PARAMS_BYTES} bytes"] if text.bytesize > MAX_PARAMS_BYTES
      text
    end

    # Whether PostgreSQL can store a string (as text or in jsonb): valid UTF-8 without NUL. JSON
    # carries both kinds of string PostgreSQL refuses: "\u0000", and a lone surrogate such as
    # "\udc00", which Ruby's parser turns into invalid UTF-8. One such param failed the INSERT of
    # its whole group (GroupCommit), every request in it answered storage_unavailable.
    # @param text [String]
    # @return [Boolean]
    def storable?(text)
      text.valid_encoding? && !text.include?("\0")
    end

    # `{"numbers": [E.164, ...], "overflow_number": E.164, "lockout_seconds": N, "name": "..."}`
    # @param body [String]
    # @return [Hash] name:, numbers:, overflow_number:, lockout_seconds:
    # @raise [Invalid] 400 for bad JSON, 422 naming the first bad field
    def ring_pool(body)
      document = parse_json(body)
      raise Invalid.new(422, "invalid_request", "expected a JSON object") unless document.is_a?(Hash)
      numbers = document["numbers"]
      unless numbers.is_a?(Array) && numbers.size.between?(MIN_NUMBERS, MAX_NUMBERS)
        raise Invalid.new(422, "invalid_numbers", "\"numbers\" must be an array of #{MIN_NUMBERS} to #{MAX_NUMBERS} phone numbers")
      end
      bad = numbers.reject { |number| E164.valid?(number) }
      raise Invalid.new(422, "invalid_numbers", "not E.164 (+ and up to 15 digits): #{bad.first(5).map(&:inspect).join(', ')}") unless bad.empty?
      raise Invalid.new(422, "invalid_numbers", '"numbers" has duplicates') unless numbers.uniq.size == numbers.size
      overflow = document["overflow_number"]
      raise Invalid.new(422, "invalid_overflow_number", '"overflow_number" must be an E.164 phone number') unless E164.valid?(overflow)
      raise Invalid.new(422, "invalid_overflow_number", '"overflow_number" must not be one of "numbers"') if numbers.include?(overflow)
      lockout = document["lockout_seconds"]
      unless lockout.is_a?(Integer) && lockout.between?(1, MAX_LOCKOUT)
        raise Invalid.new(422, "invalid_lockout_seconds", "\"lockout_seconds\" must be an integer from 1 to #{MAX_LOCKOUT}")
      end
      name = document.fetch("name", "")
      unless name.is_a?(String) && name.length <= MAX_NAME_LENGTH && storable?(name)
        raise Invalid.new(422, "invalid_name", "\"name\" must be a string of at most #{MAX_NAME_LENGTH} characters, valid UTF-8 without NUL")
      end
      { name: name, numbers: numbers, overflow_number: overflow, lockout_seconds: lockout }
    end
  end
end
