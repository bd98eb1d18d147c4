# frozen_string_literal: true

module Ringpool
  # What every shard knows about every pool, whoever owns it: enough to hand out the overflow
  # number without asking anyone. Immutable.
  RingPool = Struct.new(:id, :overflow_number, :lockout_seconds, keyword_init: true) do
    # Frozen once built: every shard's copy is shared between its fibers without a lock.
    def initialize(**)
      super
      freeze
    end

    # @return [Integer] the lockout period in microseconds
    def lockout_microseconds
      lockout_seconds * 1_000_000
    end
  end
end
