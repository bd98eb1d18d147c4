# frozen_string_literal: true

require_relative "errors"
require_relative "wait"
require_relative "../timers"

module Weft
  # Bounds how many calls into one dependency run at once, with a short, bounded queue in front:
  # a slow dependency then ties up `limit` fibers (or threads), not all of them, and callers
  # beyond the queue are refused at once instead of piling up.
  #
  #   SHARD = Weft::Bulkhead.new(limit: 10, queue: 20, timeout: 0.1)
  #   SHARD.call { shard.get("/pool/7") }   # Weft::BulkheadFull if 10 run and 20 wait already,
  #                                         # or if no slot frees up within 0.1 s
  #
  # Slots are handed to waiters in arrival order: a releasing caller passes its slot straight
  # to the oldest waiter, so a newcomer never overtakes the queue. Built on Thread::Mutex and
  # Thread::ConditionVariable, which Ruby routes through the fiber scheduler: waiting parks only
  # the fiber inside a Weft reactor and the thread outside one, and one bulkhead may be shared
  # by both.
  class Bulkhead
    # @return [Integer] calls running at once at most
    attr_reader :limit
    # @return [Integer] callers allowed to wait for a slot at most
    attr_reader :queue
    # @return [Numeric, nil] how long #call and #acquire wait for a slot by default (seconds)
    attr_reader :timeout

    # @param limit [Integer] calls at once, >= 1
    # @param queue [Integer] waiters at most, >= 0 (0: refuse whenever all slots are taken)
    # @param timeout [Numeric, nil] default wait for a slot in seconds; nil waits as long as it
    #   takes (still bounded by the caller's Weft.deadline)
    def initialize(limit:, queue: 0, timeout: nil)
      raise ArgumentError, "limit must be an Integer >= 1 (got #{limit.inspect})" unless limit.is_a?(Integer) && limit >= 1
      raise ArgumentError, "queue must be an Integer >= 0 (got #{queue.inspect})" unless queue.is_a?(Integer) && queue >= 0
      @limit = limit
      @queue = queue
      @timeout = Resilience::Wait.check(timeout)
      @active = 0    # slots taken, including those handed to a waiter that has not woken yet
      @waiters = []  # oldest first
      @mutex = Thread::Mutex.new
    end

    # Takes a slot, waiting in the queue for one if all are taken.
    # @param timeout [Numeric, nil] seconds to wait at most (and never past Weft.remaining)
    # @return [Symbol] :acquired, :full (the queue was full; no wait) or :timeout
    def acquire(timeout: @timeout)
      limit = Resilience::Wait.limit(Resilience::Wait.check(timeout))
      @mutex.synchronize do
        if @active < @limit
          @active += 1
          return :acquired
        end
        return :full if @waiters.size >= @queue
        return :timeout if limit <= 0
        wait_for_slot(limit)
      end
    end

    # Gives a slot back: to the oldest waiter if any, else to the pool.
    def release
      @mutex.synchronize do
        raise UsageError, "Bulkhead#release without a matching acquire" if @active.zero?
        pass_on
      end
      nil
    end

    # Runs the block in a slot.
    # @param timeout [Numeric, nil] seconds to wait for a slot at most
    # @raise [Weft::BulkheadFull] if the queue is full or no slot freed up within `timeout`
    # @return the block's value
    def call(timeout: @timeout)
      outcome = acquire(timeout: timeout)
      raise BulkheadFull, refusal(outcome) unless outcome == :acquired
      begin
        yield
      ensure
        release
      end
    end

    # @return [Integer] slots taken now
    def active
      @active
    end

    # @return [Integer] callers waiting for a slot now
    def waiting
      @waiters.size
    end

    # @api private
    # @param outcome [Symbol] what #acquire returned
    # @return [String] why a caller was refused, for the BulkheadFull message
    def refusal(outcome)
      if outcome == :full
        "bulkhead full: #{@limit} running, #{@queue} waiting"
      else
        "bulkhead: no slot of #{@limit} freed up in time"
      end
    end

    # One caller in the queue; the releaser sets `granted` and signals its own condition, so
    # exactly that caller wakes.
    Waiter = Struct.new(:condition, :granted)
    private_constant :Waiter

    private

    # Called holding the mutex with every slot taken.
    def wait_for_slot(limit)
      deadline = Timers.now + limit if limit.finite?
      waiter = Waiter.new(Thread::ConditionVariable.new, false)
      @waiters << waiter
      acquired = false
      begin
        until waiter.granted
          left = deadline && deadline - Timers.now
          return :timeout if left && left <= 0
          waiter.condition.wait(@mutex, left)
        end
        acquired = true
        :acquired
      ensure
        # Leaving without the slot (timeout, cancellation, deadline): step out of the queue, or
        # pass on a slot that was handed over too late to be used.
        waiter.granted ? pass_on : @waiters.delete(waiter) unless acquired
      end
    end

    # Hands a slot to the oldest waiter, or frees it. Called holding the mutex.
    def pass_on
      if (waiter = @waiters.shift)
        waiter.granted = true
        waiter.condition.signal
      else
        @active -= 1
      end
    end
  end
end
