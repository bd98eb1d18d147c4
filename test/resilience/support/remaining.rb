# frozen_string_literal: true

module Weft
  module Test
    # Makes Weft.remaining answer `seconds` while the block runs, whether or not the core's
    # deadlines (which define it) are loaded, so that guards' capping of their waits by the
    # caller's deadline can be tested on its own.
    module Remaining
      def with_remaining(seconds)
        had = Weft.singleton_class.method_defined?(:remaining)
        Weft.singleton_class.alias_method(:__remaining_before_test, :remaining) if had
        Weft.define_singleton_method(:remaining) { seconds }
        yield
      ensure
        Weft.singleton_class.remove_method(:remaining)
        if had
          Weft.singleton_class.alias_method(:remaining, :__remaining_before_test)
          Weft.singleton_class.remove_method(:__remaining_before_test)
        end
      end
    end
  end
end
