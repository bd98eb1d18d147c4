# frozen_string_literal: true

require_relative "errors"
require_relative "deadline"

module Weft
  # A value that one party supplies later and others wait for: the hand-off between a fiber
  # that issues work (a pipelined query, a request on a shared connection) and the fiber that
  # reads its answer.
  #
  # Waiting parks only the calling fiber under a reactor and the calling thread outside one
  # (it is built on Thread::Mutex and Thread::ConditionVariable, which Ruby routes through the
  # fiber scheduler), and a promise may be settled from any thread.
  #
  #   promise = Weft::Promise.new
  #   Weft.spawn { promise.fulfill(compute) }
  #   promise.wait # => the computed value
  class Promise
    def initialize
      @mutex = Thread::Mutex.new
      @settled = Thread::ConditionVariable.new
      @state = :pending
      @value = nil
    end

    # Settles the promise with a value. Settling twice raises Weft::UsageError.
    # @param value [Object] what #wait returns to every waiter
    # @return [self]
    def fulfill(value = nil)
      settle(:fulfilled, value)
    end

    # Settles the promise with an exception, which #wait raises in every waiter.
    # @param exception [Exception]
    # @return [self]
    def reject(exception)
      raise ArgumentError, "reject needs an Exception" unless exception.is_a?(Exception)
      settle(:rejected, exception)
    end

    # Waits until the promise is settled.
    # @param timeout [Numeric, nil] seconds to wait at most
    # @return the value
    # @raise the rejection, or Weft::TimeoutError when the timeout passes first
    def wait(timeout: nil)
      deadline = timeout && Deadline.after(timeout)
      @mutex.synchronize do
        while @state == :pending
          raise TimeoutError, "promise not settled within #{timeout}s" if deadline&.expired?
          @settled.wait(@mutex, deadline&.remaining)
        end
      end
      raise @value if @state == :rejected
      @value
    end

    # @return [Boolean]
    def pending?
      @state == :pending
    end

    # @return [Boolean]
    def fulfilled?
      @state == :fulfilled
    end

    # @return [Boolean]
    def rejected?
      @state == :rejected
    end

    private

    def settle(state, value)
      @mutex.synchronize do
        raise UsageError, "promise already settled" unless @state == :pending
        @state = state
        @value = value
        @settled.broadcast
      end
      self
    end
  end
end
