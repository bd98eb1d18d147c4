# frozen_string_literal: true

module Weft
  module HTTP
    # Response header fields: case-insensitive lookup, repeated fields kept in order.
    #
    #   response.headers["content-type"]     # => "text/html" (repeats joined with ", ")
    #   response.headers.all("set-cookie")   # => ["a=1", "b=2"]
    class Headers
      include Enumerable

      # @param pairs [Array<Array(String, String)>] name/value pairs as received
      def initialize(pairs)
        @pairs = pairs
      end

      # A scan of the pairs, not a lookup in an index of lower-cased names: a response has a
      # handful of fields and most are never asked for, so an index would cost more to build
      # (a String and an Array per field, for every response) than the scans it saves. Names
      # are compared with #casecmp (ASCII case, which is all a field name has), not #casecmp?,
      # which folds a copy of each String per comparison.
      # @return [String, nil] the field's value; repeats joined with ", "
      def [](name)
        name = name.to_s
        found = nil
        @pairs.each do |field, value|
          next unless field.casecmp(name) == 0
          found = found ? "#{found}, #{value}" : value
        end
        found
      end

      # @return [Array<String>] every value of the field, in order
      def all(name)
        name = name.to_s
        @pairs.filter_map { |field, value| value if field.casecmp(name) == 0 }
      end

      # @return [Boolean]
      def key?(name)
        name = name.to_s
        @pairs.any? { |field, _| field.casecmp(name) == 0 }
      end
      alias include? key?

      # Yields each name (as received) and value, in order, repeats separately.
      def each(&block)
        @pairs.each(&block)
      end

      # @return [Hash{String => String}] lower-case names, repeats joined
      def to_h
        @pairs.each_with_object({}) do |(name, value), hash|
          key = name.downcase
          hash[key] = hash.key?(key) ? "#{hash[key]}, #{value}" : value
        end
      end

      # @api private: a copy without the named fields (used after decoding a body)
      def without(*names)
        names = names.map(&:downcase)
        Headers.new(@pairs.reject { |name, _| names.include?(name.downcase) })
      end

      # @return [String] the pairs as a Hash, for logs and the console
      def inspect
        "#<#{self.class.name} #{to_h.inspect}>"
      end
    end
  end
end
