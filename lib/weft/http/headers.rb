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
        @index = {}
        pairs.each { |name, value| (@index[name.downcase] ||= []) << value }
      end

      # @return [String, nil] the field's value; repeats joined with ", "
      def [](name)
        values = @index[name.to_s.downcase]
        values && (values.size == 1 ? values.first : values.join(", "))
      end

      # @return [Array<String>] every value of the field, in order
      def all(name)
        @index.fetch(name.to_s.downcase, []).dup
      end

      # @return [Boolean]
      def key?(name)
        @index.key?(name.to_s.downcase)
      end
      alias include? key?

      # Yields each name (as received) and value, in order, repeats separately.
      def each(&block)
        @pairs.each(&block)
      end

      # @return [Hash{String => String}] lower-case names, repeats joined
      def to_h
        @index.to_h { |name, values| [name, values.join(", ")] }
      end

      # @api private: a copy without the named fields (used after decoding a body)
      def without(*names)
        names = names.map(&:downcase)
        Headers.new(@pairs.reject { |name, _| names.include?(name.downcase) })
      end

      def inspect
        "#<#{self.class.name} #{to_h.inspect}>"
      end
    end
  end
end
