# frozen_string_literal: true

module Weft
  # A binary min-heap of timers keyed on monotonic deadline.
  #
  # io-event ships a timer heap too, but it cancels lazily: a cancelled timer stays in the heap
  # until its deadline reaches the top. A server arms a timer per connection and per request
  # (idle, header and body timeouts, Weft.timeout) and cancels nearly all of them long before
  # they expire, so dead entries would pile up for the whole timeout period. Here every timer
  # knows its slot, which makes #cancel and #reschedule O(log n) and keeps the heap exactly as
  # large as the number of live timers.
  class Timers
    # One scheduled callback. Returned by Timers#after; keep it to cancel or move it.
    class Timer
      # @return [Float] the monotonic time at which it fires
      attr_reader :deadline

      # @api private
      attr_accessor :index

      def initialize(timers, deadline, callback)
        @timers = timers
        @deadline = deadline
        @callback = callback
        @index = nil
      end

      # Stops the timer from firing. Does nothing if it has fired or was cancelled already.
      def cancel
        @timers.delete(self) if @index
      end

      # @return [Boolean] whether the timer is still waiting to fire
      def active?
        !@index.nil?
      end

      # Moves the deadline to `seconds` from now, re-arming a timer that fired or was cancelled.
      def reschedule(seconds)
        @timers.move(self, Timers.now + seconds)
      end

      # @api private
      def deadline=(time)
        @deadline = time
      end

      # @api private
      def fire
        @callback.call
      end
    end

    # @return [Float] seconds on the monotonic clock, the only clock Weft's deadlines use
    def self.now
      Process.clock_gettime(Process::CLOCK_MONOTONIC)
    end

    def initialize
      @heap = []
    end

    # @return [Integer] the number of live timers
    def size
      @heap.size
    end

    # Calls the block once, `seconds` from now, in the reactor's loop fiber. The block must not
    # block; it typically wakes or raises into a task.
    # @return [Timer]
    def after(seconds, &callback)
      timer = Timer.new(self, Timers.now + seconds, callback)
      insert(timer)
      timer
    end

    # @return [Float, nil] seconds until the next deadline (0 if one is due), nil if no timers
    def wait_interval(now = Timers.now)
      first = @heap.first
      return nil unless first
      interval = first.deadline - now
      interval.negative? ? 0 : interval
    end

    # Fires every timer whose deadline has passed, earliest first.
    # @return [Integer] how many fired
    def fire(now = Timers.now)
      fired = 0
      while (first = @heap.first) && first.deadline <= now
        delete(first)
        first.fire
        fired += 1
      end
      fired
    end

    # @api private
    def delete(timer)
      index = timer.index
      last = @heap.pop
      timer.index = nil
      return if last.equal?(timer)
      @heap[index] = last
      last.index = index
      sift_down(index) unless sift_up(index)
    end

    # @api private
    def move(timer, deadline)
      if timer.index
        timer.deadline = deadline
        sift_down(timer.index) unless sift_up(timer.index)
      else
        timer.deadline = deadline
        insert(timer)
      end
      timer
    end

    private

    def insert(timer)
      timer.index = @heap.size
      @heap << timer
      sift_up(timer.index)
    end

    # @return [Boolean] whether the entry moved
    def sift_up(index)
      heap = @heap
      timer = heap[index]
      start = index
      while index.positive?
        parent = (index - 1) >> 1
        above = heap[parent]
        break if above.deadline <= timer.deadline
        heap[index] = above
        above.index = index
        index = parent
      end
      heap[index] = timer
      timer.index = index
      index != start
    end

    def sift_down(index)
      heap = @heap
      size = heap.size
      timer = heap[index]
      loop do
        child = (index << 1) + 1
        break if child >= size
        right = child + 1
        child = right if right < size && heap[right].deadline < heap[child].deadline
        below = heap[child]
        break if timer.deadline <= below.deadline
        heap[index] = below
        below.index = index
        index = child
      end
      heap[index] = timer
      timer.index = index
    end
  end
end
