# frozen_string_literal: true

module Weft
  class Server
    # rack.input for a request without a body (most of them: GET, HEAD, DELETE...). It holds no
    # state, so one instance serves every such request, where a StringIO per request cost an
    # object and its buffer each time. It answers the Rack input protocol (gets, each, read,
    # rewind, close) and the StringIO methods apps commonly call on an input (size, eof?...).
    class EmptyInput
      EMPTY = "".b.freeze

      # Like IO#read at end of file: nil when asked for a positive length, "" otherwise (into
      # `buffer` when one is given).
      def read(length = nil, buffer = nil)
        buffer&.clear
        return nil if length&.positive?
        buffer || String.new(encoding: Encoding::BINARY)
      end

      # @return [nil] no line
      def gets(*)
        nil
      end

      # Yields nothing.
      def each
        return to_enum(:each) unless block_given?
        self
      end

      # @return [Integer] 0, the position
      def rewind
        0
      end

      # @return [Integer] 0
      def size
        0
      end
      alias length size

      # @return [Integer] 0
      def pos
        0
      end

      # @return [Boolean] true: there is nothing to read
      def eof?
        true
      end
      alias eof eof?

      # Nothing to release (the instance is shared).
      def close
        nil
      end

      # @return [Boolean] false: shared, it stays readable
      def closed?
        false
      end

      # @return [Encoding] ASCII-8BIT, as Rack requires of rack.input
      def external_encoding
        Encoding::BINARY
      end

      # @return [Boolean] true
      def binmode?
        true
      end

      # @return [String] ""
      def string
        EMPTY
      end

      # @return [String] the class alone: there is no state to show
      def inspect
        "#<#{self.class.name}>"
      end

      # The one instance every bodyless request gets.
      INSTANCE = new.freeze
    end
  end
end
