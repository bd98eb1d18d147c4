# frozen_string_literal: true

require_relative "number_queue"

module Ringpool
  # The in-memory state of one pool this shard owns: its numbers in lockout order.
  #
  # Its clock never goes back: if the wall clock steps back (NTP), `now` holds still until it
  # catches up, so every new lockout ends after all earlier ones and NumberQueue stays sorted.
  class PoolState
    # One number handed out, and what undoing it needs. The number is the entry's, kept here
    # too: it is read for every row of an INSERT and every answer.
    Pick = Struct.new(:state, :entry, :previous_free_at, :locked_from, :locked_until, :number)

    # @return [RingPool]
    attr_reader :pool
    # @return [NumberQueue]
    attr_reader :queue

    # @param pool [RingPool]
    # @param numbers [Array<(String, Integer)>] each number and the end of its latest lockout
    #   (microseconds since the epoch, 0 if never handed out), as read from the table
    def initialize(pool, numbers)
      @pool = pool
      @queue = NumberQueue.new(numbers)
      @now = 0
    end

    # Hands out the number free the longest.
    # @param now [Integer] microseconds since the epoch
    # @return [Pick, nil] nil when every number is locked out (the pool is exhausted)
    def pick(now = Clock.now)
      now = @now = [now, @now].max
      head = @queue.head
      return nil if head.nil?
      previous = head.free_at
      locked_until = now + @pool.lockout_microseconds
      entry = @queue.take(now, locked_until) or return nil
      Pick.new(self, entry, previous, now, locked_until, entry.number)
    end

    # Undoes a pick that was not stored.
    # @return [void]
    def undo(pick)
      @queue.give_back(pick.entry, pick.previous_free_at)
    end

    # @return [Integer] numbers whose lockout has ended
    def free_count(now = Clock.now)
      @queue.count { |entry| entry.free_at <= now }
    end
  end
end
