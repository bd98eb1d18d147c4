# frozen_string_literal: true

module Ringpool
  # The numbers of one pool, ordered by when their lockout ends (a doubly linked list).
  #
  # The allocation rule — a number is free when its lockout has ended, and among free numbers
  # the one free the longest is taken — needs no search: every pool has one fixed lockout
  # period, so a number just handed out has the latest lockout end of all and goes to the back.
  # The list therefore stays sorted by lockout end, its head is the number free the longest,
  # and taking one is O(1): look at the head, move it to the back.
  #
  #   queue = NumberQueue.new([["+15550001", 0], ["+15550002", 0]])
  #   entry = queue.take(now, now + lockout)   # => the head, or nil when it is still locked out
  #   queue.give_back(entry, entry_previous_free_at)   # undo, when the allocation was not stored
  class NumberQueue
    # One number and the moment (microseconds since the epoch) its lockout ends.
    class Entry
      # @return [String]
      attr_reader :number
      # @return [Integer]
      attr_accessor :free_at
      # @api private: list links
      attr_accessor :previous, :following, :queue

      # @param number [String] the tracked number
      # @param free_at [Integer] when its lockout ends (microseconds since the epoch)
      def initialize(number, free_at)
        @number = number
        @free_at = free_at
      end
    end

    include Enumerable

    # @return [Integer]
    attr_reader :size

    # @param numbers [Array<(String, Integer)>] each number with the end of its last lockout
    #   (0 for one never handed out), in any order
    def initialize(numbers)
      @head = @tail = nil
      @size = 0
      numbers.sort_by { |number, free_at| [free_at, number] }.each { |number, free_at| append(Entry.new(number, free_at)) }
    end

    # Hands out the number free the longest, if its lockout has ended.
    # @param now [Integer] microseconds since the epoch
    # @param locked_until [Integer] the end of the new lockout; not before any other entry's
    #   (true when it is now + the pool's fixed lockout and `now` never goes back)
    # @return [Entry, nil] the entry (now locked until `locked_until`), nil when every number is
    #   locked out
    def take(now, locked_until)
      entry = @head
      return nil if entry.nil? || entry.free_at > now
      unlink(entry)
      entry.free_at = locked_until
      append(entry)
      entry
    end

    # Undoes a #take whose allocation was not stored: the entry gets its previous lockout end
    # back and its place in the order. O(k) for k entries given back ahead of it at once (all
    # of them free, at the front); O(1) in the usual case.
    # @param entry [Entry] from #take on this queue
    # @param free_at [Integer] its lockout end before that #take
    # @return [Boolean] false when the entry is not in this queue any more (the pool was
    #   reloaded meanwhile), in which case nothing changes
    def give_back(entry, free_at)
      return false unless entry.queue.equal?(self)
      unlink(entry)
      entry.free_at = free_at
      # Among equal lockout ends the initial order is by number; keep to it.
      cursor = @head
      cursor = cursor.following while cursor && (cursor.free_at < free_at || (cursor.free_at == free_at && cursor.number < entry.number))
      cursor ? insert_before(cursor, entry) : append(entry)
      true
    end

    # @return [Entry, nil] the number free the longest (or locked out the shortest)
    def head
      @head
    end

    # Yields the entries from the one free the longest to the one locked out the longest.
    def each
      entry = @head
      while entry
        yield entry
        entry = entry.following
      end
    end

    private

    def append(entry)
      entry.queue = self
      entry.previous = @tail
      entry.following = nil
      @tail ? (@tail.following = entry) : (@head = entry)
      @tail = entry
      @size += 1
    end

    def insert_before(cursor, entry)
      entry.queue = self
      entry.following = cursor
      entry.previous = cursor.previous
      cursor.previous ? (cursor.previous.following = entry) : (@head = entry)
      cursor.previous = entry
      @size += 1
    end

    def unlink(entry)
      entry.previous ? (entry.previous.following = entry.following) : (@head = entry.following)
      entry.following ? (entry.following.previous = entry.previous) : (@tail = entry.previous)
      entry.previous = entry.following = entry.queue = nil
      @size -= 1
    end
  end
end
