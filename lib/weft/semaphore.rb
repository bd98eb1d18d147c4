# frozen_string_literal: true

require_relative "errors"
require_relative "deadline"

module Weft
  # Bounds how many holders may be inside a section at once.
  #
  # Built on Thread::Mutex and Thread::ConditionVariable, which Ruby routes through the fiber
  # scheduler, so one semaphore works for tasks in a reactor, for plain threads, and for both
  # at once.
  #
  #   limit = Weft::Semaphore.new(10)
  #   urls.each { |url| Weft.spawn { limit.synchronize { fetch(url) } } }
  class Semaphore
    # @return [Integer]
    attr_reader :limit

    # @param limit [Integer] how many holders at once (at least 1)
    def initialize(limit)
      raise ArgumentError, "limit must be a positive Integer" unless limit.is_a?(Integer) && limit.positive?
      @limit = limit
      @held = 0
      @waiting = 0
      @mutex = Thread::Mutex.new
      @available = Thread::ConditionVariable.new
    end

    # Takes a permit, waiting for one if none is free.
    # @param timeout [Numeric, nil] seconds to wait at most
    # @return [Boolean] true, or false if the timeout passed first
    def acquire(timeout: nil)
      deadline = timeout && Deadline.after(timeout)
      @mutex.synchronize do
        @waiting += 1
        begin
          while @held >= @limit
            return false if deadline&.expired?
            @available.wait(@mutex, deadline&.remaining)
          end
        ensure
          @waiting -= 1
        end
        @held += 1
      end
      true
    end

    # Returns a permit and lets one waiter in.
    def release
      @mutex.synchronize do
        raise UsageError, "release without a matching acquire" if @held.zero?
        @held -= 1
        @available.signal
      end
      nil
    end

    # Runs the block holding a permit.
    # @raise [Weft::TimeoutError] if `timeout` passes before a permit is free
    def synchronize(timeout: nil)
      raise TimeoutError, "no permit free within #{timeout}s" unless acquire(timeout: timeout)
      begin
        yield
      ensure
        release
      end
    end

    # @return [Integer] permits currently held
    def count
      @held
    end

    # @return [Integer] callers waiting for a permit
    def waiting
      @waiting
    end

    # @return [Boolean] whether #acquire would have to wait
    def blocking?
      @held >= @limit
    end
  end
end
