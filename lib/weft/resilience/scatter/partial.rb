# frozen_string_literal: true

module Weft
  class Scatter
    # What a scatter gathered before its fallbacks ran: the items that succeeded and their
    # values, in item order. A fallback that takes a third argument gets one, so it can answer
    # from what the other items returned (a quorum, the freshest of the replies, "how many
    # shards answered").
    #
    #   fallback = lambda do |_shard, _error, partial|
    #     raise NotEnoughReplies if partial.size < partial.total / 2
    #     partial.values.max_by(&:version)
    #   end
    class Partial
      include Enumerable

      # @return [Integer] how many items the scatter had, succeeded or not
      attr_reader :total

      # @api private: Weft::Scatter builds it
      # @param pairs [Array<Array(Object, Object)>] [item, value] per item that succeeded
      def initialize(pairs, total)
        @pairs = pairs.freeze
        @total = total
        freeze
      end

      # Yields each item that succeeded with its value, in item order.
      # @yieldparam item
      # @yieldparam value
      def each(&block)
        return enum_for(:each) { size } unless block
        @pairs.each { |item, value| block.call(item, value) }
        self
      end

      # @return [Array] the values of the items that succeeded, in item order
      def values
        @pairs.map(&:last)
      end

      # @return [Array] the items that succeeded, in item order
      def items
        @pairs.map(&:first)
      end

      # @return [Integer] how many items succeeded
      def size
        @pairs.size
      end

      # @return [Boolean] whether no call succeeded
      def empty?
        @pairs.empty?
      end

      # @return [String] how many calls succeeded of how many, for logs and the console
      def inspect
        "#<#{self.class.name} #{size}/#{@total} succeeded>"
      end
    end
  end
end
