# frozen_string_literal: true

require_relative "../../weft"
require_relative "errors"
require_relative "completion_queue"
require_relative "scatter/partial"

module Weft
  class << self
    # Calls the block for every item, each in a task of its own, and returns the results in
    # item order by the deadline; an item that fails or is late gets its fallback. See
    # Weft::Scatter.
    #
    #   Weft.scatter(shards, deadline: 0.2, fallback: ->(shard, _error) { shard.overflow }) do |shard|
    #     shard.client.post("/allocate", body: request).body
    #   end
    # @param items [Enumerable] one block call, in a task of its own, per item
    # @param deadline [Numeric, nil] seconds from the call; nil: the caller's deadline alone
    # @param concurrency [Integer, nil] items running at once at most; nil: all
    # @param fallback [#call, nil] `(item, error)` or `(item, error, partial)` => the result of
    #   an item that failed or was late; nil: the first failure is raised
    # @return [Array] the results in item order
    def scatter(items, deadline: nil, concurrency: nil, fallback: nil, &block)
      Scatter.new(deadline: deadline, concurrency: concurrency, fallback: fallback).call(items, &block)
    end
  end

  # Scatter-gather with a deadline and fallbacks, after the ring-pool service of the seed talk:
  # ask every shard at once, wait no longer than the deadline, and hand out an overflow answer
  # for every shard that failed or did not answer in time instead of failing the request.
  #
  # #call runs the block for each item in a task of its own (a child of the caller), at most
  # `concurrency` at a time, and returns the results in item order.
  #
  # * **Deadline.** The earlier of `deadline:` and the caller's own (Weft.deadline) bounds the
  #   whole call, and the item tasks inherit it, so their own waits (an HTTP request, a query)
  #   end by it too. When it passes, the items still running are cancelled (their ensure blocks
  #   run: they get one turn of the loop, enough for cleanup that does not wait) and #call
  #   returns at once. Items that never started get a Weft::DeadlineExceeded.
  # * **With a fallback,** an item that raised a StandardError, or was late, gets the
  #   fallback's value in its slot: `fallback.call(item, error)`, or `(item, error, partial)`
  #   when the fallback takes three arguments, `partial` being a Scatter::Partial with the items
  #   that succeeded and their values. Fallbacks run in the caller's fiber once every item has
  #   settled, in item order. An exception that is not a StandardError (NoMemoryError,
  #   ScriptError...), or a NameError (NoMethodError included), is a bug, not an outage
  #   (Resilience.bug?): it is raised as if there were no fallback.
  # * **Without a fallback,** the first failure (in time) cancels the other items and is raised
  #   in the caller: the same exception object, its backtrace the item task's, followed by the
  #   caller's from the #call site (so both where it happened and where it was gathered show).
  #   When the deadline passes first, Weft::DeadlineExceeded is raised.
  # * A fallback that raises propagates its own exception.
  # * Exceptions stay in the item tasks: none reaches the reactor or another item. When the
  #   caller itself is cancelled (or any exception ends its wait), the items are cancelled and
  #   the exception propagates.
  #
  # Outside a reactor #call starts one (Weft.run) for the duration of the call, so a plain
  # thread (a Puma worker, say) can scatter too.
  class Scatter
    # The task name of item tasks.
    ITEM_TASK = "Weft.scatter item"
    # This file's frames, left out of the gather point added to a raised item failure.
    HERE = "#{__FILE__}:"
    private_constant :HERE

    # @param deadline [Numeric, nil] seconds from the call; nil: the caller's deadline alone
    #   (and none at all when the caller has none)
    # @param concurrency [Integer, nil] items running at once at most; nil: all
    # @param fallback [#call, nil] `(item, error)` or `(item, error, partial)` => the item's result
    # @raise [ArgumentError] for a negative or non-finite deadline, a concurrency below 1 or a
    #   fallback that cannot take (item, error)
    def initialize(deadline: nil, concurrency: nil, fallback: nil)
      @deadline = deadline.nil? ? nil : Deadline.validate(deadline)
      unless concurrency.nil? || (concurrency.is_a?(Integer) && concurrency >= 1)
        raise ArgumentError, "concurrency must be nil or an Integer >= 1 (got #{concurrency.inspect})"
      end
      @concurrency = concurrency
      @fallback = fallback
      @fallback_takes_partial = fallback && takes_partial?(fallback)
      freeze
    end

    # Runs the block for each item; see the class comment.
    # @param items [Enumerable]
    # @yieldparam item one of the items
    # @return [Array] one result per item, in item order
    def call(items, &block)
      raise ArgumentError, "Weft.scatter needs a block" unless block
      gathering = Gathering.new(items.to_a, @concurrency, !@fallback.nil?, block)
      results = Weft.run { Weft.deadline(@deadline) { |deadline| gathering.call(deadline) } }
      apply_fallbacks(gathering, results) if gathering.failed?
      results
    rescue Exception => e # rubocop:disable Lint/RescueException
      # The item's own backtrace says where it failed; the caller's says where it was gathered.
      if gathering&.raised?(e) && !e.frozen? && e.backtrace
        e.set_backtrace(e.backtrace + caller.drop_while { |line| line.start_with?(HERE) })
      end
      raise
    end

    private

    # @return [Boolean] whether `fallback` wants the partial results as a third argument
    # @raise [ArgumentError] when it cannot be called with (item, error)
    def takes_partial?(fallback)
      raise ArgumentError, "fallback must respond to #call (got #{fallback.inspect})" unless fallback.respond_to?(:call)
      return true if fallback.is_a?(Proc) && !fallback.lambda? # a block takes any arguments
      parameters = (fallback.is_a?(Proc) || fallback.is_a?(Method) ? fallback : fallback.method(:call)).parameters
      positional = parameters.count { |type, _| type == :req || type == :opt }
      rest = parameters.any? { |type, _| type == :rest }
      required = parameters.count { |type, _| type == :req }
      if required > 3 || (positional < 2 && !rest)
        raise ArgumentError, "fallback must take (item, error) or (item, error, partial)"
      end
      rest || positional >= 3
    end

    # Fills the slot of every item that failed or was late with its fallback's value.
    def apply_fallbacks(gathering, results)
      partial = gathering.partial
      gathering.errors.each_with_index do |error, index|
        next unless error
        item = gathering.items[index]
        results[index] = @fallback_takes_partial ? @fallback.call(item, error, partial) : @fallback.call(item, error)
      end
    end

    # The state of one #call: which items started, which settled and how.
    # @api private
    class Gathering
      # @return [Array] the items, in order
      attr_reader :items
      # @return [Array<Exception, nil>] per item, what it failed with (nil: it succeeded)
      attr_reader :errors

      # @param tolerant [Boolean] whether failures are recorded for fallbacks rather than raised
      def initialize(items, concurrency, tolerant, block)
        @items = items
        @tolerant = tolerant
        @block = block
        @limit = concurrency || items.size
        @results = Array.new(items.size)
        @errors = Array.new(items.size)
        @settled_items = Array.new(items.size, false)
        @started = 0
        @running = 0
        @settled = 0
        @raised = nil
        @failed = false
        @queue = Resilience::CompletionQueue.new
      end

      # Runs the items under `deadline` (the one in force; nil for none) and returns the results,
      # with nil in the slots of items that failed (see #errors). Raises the first failure unless
      # tolerant, in which case failures are only recorded.
      # @return [Array]
      def call(deadline)
        expiry = DeadlineExceeded.new(deadline.message) if deadline&.expired?
        begin
          run_items unless expiry
        rescue DeadlineExceeded => e
          # Raised by the timer of the deadline in force (ours, or the caller's when earlier):
          # the time is up. One raised when it has not passed comes from elsewhere.
          raise unless deadline&.expired?
          expiry = e
        end
        give_up(expiry) if expiry
        @results
      ensure
        @queue.cancel(unwind: false)
        @queue.drain
      end

      # @return [Boolean] whether an item failed or was late
      def failed?
        @failed
      end

      # @return [Boolean] whether `error` is an item's failure that #call raised
      def raised?(error)
        error.equal?(@raised)
      end

      # @return [Partial] the items that succeeded, with their values
      def partial
        pairs = []
        @errors.each_with_index { |error, index| pairs << [@items[index], @results[index]] unless error }
        Partial.new(pairs, @items.size)
      end

      private

      def run_items
        size = @items.size
        while @settled < size
          start(@started) while @running < @limit && @started < size
          index, status, outcome = @queue.pop
          @running -= 1
          settle(index, status, outcome)
        end
      end

      def start(index)
        @started += 1
        @running += 1
        @queue.spawn(index, @items[index], name: ITEM_TASK, &@block)
      end

      def settle(index, status, outcome)
        @settled += 1
        @settled_items[index] = true
        if status == :completed
          @results[index] = outcome
        elsif !@tolerant || (status == :failed && Resilience.bug?(outcome))
          fail_with(outcome)
        else
          @errors[index] = outcome
          @failed = true
        end
      end

      # The first failure nothing may stand in for: cancel the rest, let them unwind, raise it.
      def fail_with(error)
        @queue.cancel
        @raised = error
        raise error
      end

      # The deadline passed: cancel what still runs and give every item without an outcome the
      # expiry. Items that ended while the deadline passed keep what they ended with.
      def give_up(expiry)
        @queue.cancel
        raise expiry unless @tolerant
        @queue.drain.each do |index, status, outcome|
          # Cancelled here, an item was late: it gets the expiry below.
          settle(index, status, outcome) unless status == :cancelled
        end
        @settled_items.each_with_index do |settled, index|
          next if settled
          @errors[index] = expiry
          @failed = true
        end
      end
    end
  end
end
