# frozen_string_literal: true

require_relative "errors"
require_relative "timers"

module Weft
  # A moment on the monotonic clock by which some work must be done: the one value every wait in
  # Weft is bounded by.
  #
  # A deadline is immutable and compares by time, so "the earlier of two" is `[a, b].min` (or
  # Deadline.earliest, which also takes nils). The current deadline of a fiber is the one set by
  # the innermost Weft.deadline around it, or inherited by its task from the task that spawned it;
  # Deadline.current returns it and Weft.remaining tells the seconds left.
  #
  #   deadline = Weft::Deadline.after(0.05)
  #   deadline.remaining        # => 0.0499...
  #   deadline.bound(1)         # => 0.0499... (a 1 s wait may last only as long as is left)
  #   deadline.bound(nil)       # => 0.0499... (no limit of its own: the deadline is the limit)
  class Deadline
    include Comparable

    # The key under which a fiber keeps its current deadline (Thread#[] is fiber-local).
    FIBER_KEY = :weft_deadline
    private_constant :FIBER_KEY

    class << self
      # @param seconds [Numeric] how long from now (zero or more, finite)
      # @return [Deadline]
      # @raise [ArgumentError] for a negative, infinite or non-numeric duration
      def after(seconds)
        new(Timers.now + validate(seconds), seconds)
      end

      # The deadline `seconds` from now or the current one, whichever comes first.
      # @param seconds [Numeric, nil] nil: the current deadline alone
      # @return [Deadline, nil] nil when there is neither
      def within(seconds)
        earliest(seconds && after(seconds), current)
      end

      # @return [Deadline, nil] the earlier of the two; either may be nil
      def earliest(first, second)
        return first || second unless first && second
        first.at <= second.at ? first : second
      end

      # @return [Deadline, nil] the deadline of the calling fiber
      def current
        Thread.current[FIBER_KEY]
      end

      # @api private: sets the calling fiber's deadline (Weft.deadline and Task do this).
      def current=(deadline)
        Thread.current[FIBER_KEY] = deadline
      end

      # @return [Numeric] seconds, after checking they can make a deadline
      # @raise [ArgumentError]
      def validate(seconds)
        unless seconds.is_a?(Numeric) && seconds.real? && seconds.finite? && !seconds.negative?
          raise ArgumentError, "a deadline needs a finite, non-negative number of seconds (got #{seconds.inspect})"
        end
        seconds
      end
    end

    # @return [Float] the monotonic time (Timers.now) at which it passes
    attr_reader :at

    # @param at [Float] monotonic time
    # @param seconds [Numeric, nil] the duration it was made from, for messages
    def initialize(at, seconds = nil)
      @at = at.to_f
      @seconds = seconds
      freeze
    end

    # @return [Float] seconds left, never negative
    def remaining(now = Timers.now)
      left = @at - now
      left.positive? ? left : 0.0
    end

    # @return [Boolean] whether the deadline has passed
    def expired?(now = Timers.now)
      now >= @at
    end

    # How long a wait of `seconds` may last under this deadline.
    # @param seconds [Numeric, nil] the wait's own limit (nil: none)
    # @return [Float] the smaller of the two
    def bound(seconds)
      left = remaining
      seconds.nil? || seconds > left ? left : seconds
    end

    # Raises DeadlineExceeded if the deadline has passed; for code about to start work that
    # cannot finish in no time.
    # @return [self]
    def check!
      raise DeadlineExceeded, message if expired?
      self
    end

    # @return [String] the text of the DeadlineExceeded this deadline raises
    def message
      @seconds ? "deadline of #{@seconds}s exceeded" : "deadline exceeded"
    end

    # Deadlines order by when they pass: the earliest is the one that binds.
    # @return [Integer, nil] nil for anything but a Deadline
    def <=>(other)
      @at <=> other.at if other.is_a?(Deadline)
    end

    # @return [String] the time left, for logs and the console
    def to_s
      "#<#{self.class.name} #{format('%.3f', remaining)}s left>"
    end
    alias inspect to_s
  end
end
