# frozen_string_literal: true

require_relative "waiter"

module Weft
  module Postgres
    # One statement on its way through a shared connection's pipeline, and the hand-off of its
    # outcome to the fiber (or thread) that waits for it.
    #
    # Every field is read and written under the pool's lock; `condition` is signalled when the
    # request is settled or when its waiter is asked to take over reading the connection.
    #
    # A request answered goes back to its pool, which reuses it, and its Waiter, for a later
    # statement (Pool#pipelined): two objects fewer per statement, which the garbage collector
    # would otherwise sweep at every turn of a busy pool.
    class Request
      # @return [String]
      attr_reader :sql
      # @return [Array]
      attr_reader :params
      # @return [Waiter] what the caller sleeps on
      attr_reader :condition
      # @return [Float, nil] monotonic time it was handed to libpq
      attr_accessor :sent_at
      # @return [PG::Result, nil] the statement's result as it arrives, before its sync point
      attr_accessor :result
      # @return [Boolean] whether it was in flight while a cancel request meant for another
      #   statement was on its way to the server (so a cancellation it meets may not be its own)
      attr_accessor :exposed
      alias exposed? exposed
      # @return [Boolean] whether it must be sent in a segment of its own (no other statement
      #   in its transaction)
      attr_accessor :alone
      # @return [Boolean] whether the pool has seen it run long (see SlowStatements): it is sent
      #   alone, and no other statement is sent down its connection until it ends
      attr_accessor :slow
      # @return [Boolean] whether a sync point followed it (it ends its segment)
      attr_accessor :segment_end
      # @return [Integer] how often it was sent again because its segment was rolled back
      attr_accessor :resent
      # @return [PreparedStatements::Statement, nil] the named statement it was sent as (nil:
      #   unnamed)
      attr_accessor :named
      # @return [Array, nil] what was sent before it on its behalf, whose results come first:
      #   names DEALLOCATEd (String) and the Parse of its named statement (its Statement)
      attr_accessor :prelude
      # @return [Boolean] whether something of its prelude failed (the segment was rolled back
      #   for it: the statement is sent again, unnamed)
      attr_accessor :prelude_failed
      # @return [Boolean] whether it is to be sent unnamed (its named statement failed it)
      attr_accessor :unnamed

      # @param sql [String]
      # @param params [Array, nil] the bind parameters
      def initialize(sql, params)
        @condition = Waiter.new
        reset(sql, params)
      end

      # Clears what the last statement left and takes the next one.
      # @return [self]
      def reset(sql, params)
        @sql = sql
        @params = params
        @sent_at = nil
        @result = nil
        @exposed = false
        @alone = false
        @slow = false
        @segment_end = false
        @resent = 0
        @named = nil
        @prelude = nil
        @prelude_failed = false
        @unnamed = false
        @settled = false
        @error = nil
        @abandoned = false
        self
      end

      # Records the outcome and wakes the waiter.
      # @param error [Exception, nil] raised by #value when set
      def settle(error = nil)
        @settled = true
        @error = error
        @condition.signal
      end

      # @return [Boolean]
      def settled?
        @settled
      end

      # Hands the outcome over, once: the request forgets it, and its statement, so that a
      # fiber's idle request holds on to no result (which may be large) until its next statement.
      # @return [PG::Result] the result
      # @raise the error the request was settled with
      def value
        result = @result
        error = @error
        @result = @error = @sql = @params = nil
        if error
          # Made (raised by PG::Result#check) in whichever fiber read the connection's results,
          # which settles every statement of a segment: its backtrace would show that fiber's
          # code, another caller's. Cleared, the raise here gives it the caller's own.
          error.set_backtrace(nil)
          raise error
        end
        result
      end

      # The waiter left (it was cancelled or timed out): the result will be thrown away.
      def abandon
        @abandoned = true
      end

      # @return [Boolean]
      def abandoned?
        @abandoned
      end
    end
  end
end
