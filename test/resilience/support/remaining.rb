# frozen_string_literal: true

module Weft
  module Test
    # Makes Weft.remaining answer `seconds` while the block runs, so that a guard's capping of its
    # waits by the caller's deadline is tested on its own, without a deadline timer racing it.
    module Remaining
      def with_remaining(seconds)
        Weft.singleton_class.alias_method(:__remaining_before_test, :remaining)
        Weft.define_singleton_method(:remaining) { seconds }
        yield
      ensure
        Weft.singleton_class.alias_method(:remaining, :__remaining_before_test)
        Weft.singleton_class.remove_method(:__remaining_before_test)
      end
    end
  end
end
