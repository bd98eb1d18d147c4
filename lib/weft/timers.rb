# frozen_string_literal: true

module Weft
  # The reactor's timers: callbacks due at a monotonic deadline.
  #
  # Timers are kept in one FIFO list per duration, and the lists in a binary min-heap keyed on
  # their first timer's deadline. Timers armed with the same duration expire in the order they
  # were armed (the monotonic clock never goes back), so appending keeps a list sorted, and
  # cancelling unlinks a timer in O(1). A server arms most of its timers with a few fixed
  # durations (linger, idle, header and body timeouts) and cancels nearly all of them long
  # before they expire: with one heap entry per timer, each cancel re-sorted the heap, which
  # cost a hello-world request about 8% of its CPU time; now only a list whose first timer goes
  # moves in the heap of lists, which stays as small as the number of distinct durations.
  #
  # io-event ships a timer heap too, but it cancels lazily: a cancelled timer stays in the heap
  # until its deadline reaches the top, so dead entries would pile up for the whole timeout
  # period. Here the structure holds exactly the live timers.
  class Timers
    # One scheduled callback. Returned by Timers#after; keep it to cancel or move it.
    class Timer
      # @return [Float] the monotonic time at which it fires
      attr_reader :deadline
      # @api private: the List it waits in (nil once fired or cancelled), and its neighbours
      attr_accessor :list, :previous, :following

      # @param callback [#call]
      def initialize(timers, deadline, callback)
        @timers = timers
        @deadline = deadline
        @callback = callback
        @list = @previous = @following = nil
      end

      # Stops the timer from firing. Does nothing if it has fired or was cancelled already.
      def cancel
        @timers.delete(self) if @list
      end

      # @return [Boolean] whether the timer is still waiting to fire
      def active?
        !@list.nil?
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

    # The timers of one duration, earliest first (a doubly linked list through the timers).
    class List
      # @return [Float] the duration every timer in it was armed with
      attr_reader :duration
      # @return [Timer, nil] the earliest timer
      attr_reader :first
      # @api private: the list's slot in the heap of lists
      attr_accessor :index

      def initialize(duration)
        @duration = duration
        @first = @last = nil
        @index = nil
      end

      # @return [Float] when the earliest timer is due
      def deadline
        @first.deadline
      end

      # @return [Boolean]
      def empty?
        @first.nil?
      end

      def push(timer)
        timer.list = self
        timer.previous = @last
        timer.following = nil
        if @last
          @last.following = timer
        else
          @first = timer
        end
        @last = timer
      end

      def unlink(timer)
        previous = timer.previous
        following = timer.following
        if previous
          previous.following = following
        else
          @first = following
        end
        if following
          following.previous = previous
        else
          @last = previous
        end
        timer.list = timer.previous = timer.following = nil
      end
    end

    # @return [Float] seconds on the monotonic clock, the only clock Weft's deadlines use
    def self.now
      Process.clock_gettime(Process::CLOCK_MONOTONIC)
    end

    def initialize
      @heap = [] # of Lists, keyed on List#deadline
      @lists = {} # duration => List
      @size = 0
    end

    # @return [Integer] the number of live timers
    attr_reader :size

    # Calls `callback` (or the block) once, `seconds` from now, in the reactor's loop fiber. It
    # must not block; it typically wakes or raises into a task.
    # @param callback [#call, nil] instead of a block: lets a caller that arms many timers
    #   reuse one callable rather than allocate a Proc for each
    # @return [Timer]
    def after(seconds, callback = nil, &block)
      timer = Timer.new(self, Timers.now + seconds, callback || block)
      insert(timer, seconds)
      timer
    end

    # @return [Float, nil] seconds until the next deadline (0 if one is due), nil if no timers
    def wait_interval(now = Timers.now)
      list = @heap.first
      return nil unless list
      interval = list.deadline - now
      interval.negative? ? 0 : interval
    end

    # Fires every timer whose deadline has passed, earliest first.
    # @return [Integer] how many fired
    def fire(now = Timers.now)
      fired = 0
      while (list = @heap.first) && (timer = list.first).deadline <= now
        delete(timer)
        timer.fire
        fired += 1
      end
      fired
    end

    # @api private
    def delete(timer)
      list = timer.list
      was_first = list.first.equal?(timer)
      list.unlink(timer)
      @size -= 1
      if list.empty?
        @lists.delete(list.duration)
        remove_list(list)
      elsif was_first && @heap.size > 1
        sift_down(list.index) # the list's deadline moved later
      end
    end

    # @api private
    def move(timer, seconds)
      delete(timer) if timer.list
      timer.deadline = Timers.now + seconds
      insert(timer, seconds)
      timer
    end

    private

    def insert(timer, seconds)
      @size += 1
      list = @lists[seconds]
      if list
        list.push(timer)
      else
        list = @lists[seconds] = List.new(seconds)
        list.push(timer)
        list.index = @heap.size
        @heap << list
        sift_up(list.index)
      end
    end

    def remove_list(list)
      index = list.index
      last = @heap.pop
      list.index = nil
      return if last.equal?(list)
      @heap[index] = last
      last.index = index
      sift_down(index) unless sift_up(index)
    end

    # @return [Boolean] whether the entry moved
    def sift_up(index)
      heap = @heap
      list = heap[index]
      deadline = list.deadline
      start = index
      while index.positive?
        parent = (index - 1) >> 1
        above = heap[parent]
        break if above.deadline <= deadline
        heap[index] = above
        above.index = index
        index = parent
      end
      heap[index] = list
      list.index = index
      index != start
    end

    def sift_down(index)
      heap = @heap
      size = heap.size
      list = heap[index]
      deadline = list.deadline
      loop do
        child = (index << 1) + 1
        break if child >= size
        right = child + 1
        child = right if right < size && heap[right].deadline < heap[child].deadline
        below = heap[child]
        break if deadline <= below.deadline
        heap[index] = below
        below.index = index
        index = child
      end
      heap[index] = list
      list.index = index
    end
  end
end
