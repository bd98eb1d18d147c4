# frozen_string_literal: true

module Weft
  # The reactor's timers: callbacks due at a monotonic deadline.
  #
  # Timers armed with the same duration expire in the order they were armed (the monotonic clock
  # never goes back), so they are kept in one FIFO chain per duration, linked through the timers
  # themselves, and only the first timer of each chain sits in a binary min-heap keyed on its
  # deadline. Appending to a chain is O(1), and so is cancelling any timer but a chain's first; a
  # cancelled or fired first timer hands its heap slot to its successor, which is due later, so
  # the slot only ever moves down. A server arms most of its timers with a few fixed durations
  # (linger, idle, header and body timeouts) and cancels nearly all of them long before they
  # expire: with one heap entry per timer, each cancel re-sorted the heap, which cost a
  # hello-world request about 8% of its CPU time; here the heap stays as small as the number of
  # distinct durations. Timers of durations all different (sleeps of computed lengths) cost one
  # heap entry each, as in a plain heap: the chains are the timers themselves, so no object is
  # made beyond the Timer.
  #
  # io-event ships a timer heap too, but it cancels lazily: a cancelled timer stays in the heap
  # until its deadline reaches the top, so dead entries would pile up for the whole timeout
  # period. Here the structure holds exactly the live timers.
  class Timers
    # The longest a poll is told to wait for the next timer, in seconds. Selectors reject a
    # timeout too long for their own representation (epoll's is an int of milliseconds,
    # io-event's a timespec): a timer at Float::INFINITY or 1e19 s from now made the poll raise
    # EINVAL in the loop fiber, which ended the reactor. A timer further out is reached in
    # several polls.
    LONGEST_WAIT = 3600.0

    # One scheduled callback. Returned by Timers#after; keep it to cancel or move it.
    class Timer
      # @return [Float] the monotonic time at which it fires
      attr_reader :deadline
      # @api private: the duration it was armed with (its chain's key; nil once fired or
      # cancelled), its neighbours in that chain, and its heap slot while it is the chain's first
      attr_accessor :duration, :previous, :following, :index

      # @param callback [#call]
      def initialize(timers, deadline, callback)
        @timers = timers
        @deadline = deadline
        @callback = callback
        @duration = @previous = @following = @index = nil
      end

      # Stops the timer from firing. Does nothing if it has fired or was cancelled already.
      def cancel
        @timers.delete(self) if @duration
      end

      # @return [Boolean] whether the timer is still waiting to fire
      def active?
        !@duration.nil?
      end

      # Moves the deadline to `seconds` from now, re-arming a timer that fired or was cancelled.
      def reschedule(seconds)
        @timers.move(self, seconds)
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
      @heap = [] # the first Timer of every chain, keyed on Timer#deadline
      @tails = {} # duration => the last Timer of that duration's chain
      @size = 0
    end

    # @return [Integer] the number of live timers
    attr_reader :size

    # Calls `callback` (or the block) once, `seconds` from now, in the reactor's loop fiber. It
    # must not block; it typically wakes or raises into a task.
    # @param seconds [Numeric] zero or less fires on the next look; Float::INFINITY never fires
    # @param callback [#call, nil] instead of a block: lets a caller that arms many timers
    #   reuse one callable rather than allocate a Proc for each
    # @return [Timer]
    # @raise [ArgumentError] for NaN, which is neither before nor after any moment: in the heap it
    #   would hold back every timer below it
    def after(seconds, callback = nil, &block)
      timer = Timer.new(self, deadline_after(seconds), callback || block)
      insert(timer, seconds)
      timer
    end

    # @return [Float, nil] seconds until the next deadline (0 if one is due, at most
    #   LONGEST_WAIT), nil if no timers
    def wait_interval(now = Timers.now)
      deadline = next_deadline or return nil
      interval = deadline - now
      return 0 if interval.negative?
      interval > LONGEST_WAIT ? LONGEST_WAIT : interval
    end

    # @return [Float, nil] the earliest deadline of the live timers, nil if there are none
    def next_deadline
      @heap.first&.deadline
    end

    # Fires every timer whose deadline has passed, earliest first.
    # @return [Integer] how many fired
    def fire(now = Timers.now)
      fired = 0
      while (timer = @heap.first) && timer.deadline <= now
        delete(timer)
        timer.fire
        fired += 1
      end
      fired
    end

    # @api private
    def delete(timer)
      previous = timer.previous
      following = timer.following
      @size -= 1
      if previous
        previous.following = following
      else
        # The chain's first: its successor, due later, takes over its heap slot.
        index = timer.index
        timer.index = nil
        if following
          following.index = index
          @heap[index] = following
          sift_down(index)
        else
          remove_slot(index)
        end
      end
      if following
        following.previous = previous
      elsif previous
        @tails[timer.duration] = previous
      else
        @tails.delete(timer.duration)
      end
      timer.duration = timer.previous = timer.following = nil
    end

    # @api private
    def move(timer, seconds)
      deadline = deadline_after(seconds)
      delete(timer) if timer.duration
      timer.deadline = deadline
      insert(timer, seconds)
      timer
    end

    private

    def deadline_after(seconds)
      deadline = Timers.now + seconds
      raise ArgumentError, "a timer needs a number of seconds, not NaN" if deadline.nan?
      deadline
    end

    def insert(timer, seconds)
      @size += 1
      timer.duration = seconds
      tail = @tails[seconds]
      @tails[seconds] = timer
      if tail
        tail.following = timer
        timer.previous = tail
      else
        index = @heap.size
        timer.index = index
        @heap << timer
        sift_up(index)
      end
    end

    def remove_slot(index)
      last = @heap.pop
      return if index == @heap.size # it was the last slot
      @heap[index] = last
      last.index = index
      sift_down(index) unless sift_up(index)
    end

    # @return [Boolean] whether the entry moved
    def sift_up(index)
      heap = @heap
      timer = heap[index]
      deadline = timer.deadline
      start = index
      while index.positive?
        parent = (index - 1) >> 1
        above = heap[parent]
        break if above.deadline <= deadline
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
      deadline = timer.deadline
      # A while loop rather than Kernel#loop: a `break` out of a block is a throw, slow on YJIT.
      while (child = (index << 1) + 1) < size
        right = child + 1
        child = right if right < size && heap[right].deadline < heap[child].deadline
        below = heap[child]
        break if deadline <= below.deadline
        heap[index] = below
        below.index = index
        index = child
      end
      heap[index] = timer
      timer.index = index
    end
  end
end
