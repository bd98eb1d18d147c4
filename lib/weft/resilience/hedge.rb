# frozen_string_literal: true

require_relative "../../weft"
require_relative "errors"
require_relative "completion_queue"
require_relative "hedge/latencies"

module Weft
  class << self
    # Runs the block and, if it has not finished after `after` seconds, runs it again alongside,
    # up to `max` attempts at once; the first success wins. ONLY FOR IDEMPOTENT WORK. See
    # Weft::Hedge, which also hedges after a percentile of observed latencies.
    #
    #   Weft.hedge(after: 0.05, max: 2) { |attempt| replicas[attempt - 1].get("/user/42").body }
    # @param after [Numeric] seconds before the next attempt starts (a percentile needs a
    #   Weft::Hedge that outlives the call, to learn the latencies from)
    # @param max [Integer] attempts at most, the first included
    # @param budget [RetryBudget, nil] bounds the extra attempts; nil: no limit
    # @yieldparam attempt [Integer] 1, 2... in the order attempts start
    # @return the first successful attempt's value
    # @raise the last failure when every attempt failed
    def hedge(after:, max: 2, budget: nil, &block)
      if after.is_a?(Symbol)
        raise ArgumentError, "after: #{after.inspect} needs the latencies of earlier calls: " \
                             "keep a Weft::Hedge.new(after: #{after.inspect}) and call it"
      end
      Hedge.new(after: after, max: max, budget: budget).call(&block)
    end
  end

  # Hedged requests ("The Tail at Scale"): when an attempt is slower than usual, start another
  # one instead of waiting for it, and take whichever answers first. A few percent more
  # requests cut the tail latency that one slow replica, a lost packet or a GC pause would
  # otherwise cause.
  #
  # **Only for idempotent work.** Attempts run at the same time and a losing attempt is
  # cancelled wherever it is, possibly after its request reached the server: a read, or a write
  # the server deduplicates (an idempotency key), may be hedged; a payment may not.
  #
  #   REPLICAS = Weft::Hedge.new(after: :p95, max: 2)   # keep it: it learns the latencies
  #   REPLICAS.call { |attempt| replicas[attempt % replicas.size].get(path).body }
  #
  # * Attempt 1 starts at once. Each further attempt starts when the previous one has run for
  #   `after` seconds without an answer (a fixed delay, or a percentile such as `:p95` of the
  #   latencies of this policy's recent successful attempts; until `warmup` of them have been
  #   seen, a percentile policy does not hedge), or at once when an attempt fails, while fewer
  #   than `max` attempts have started.
  # * The first attempt to return wins; the others are cancelled and their ensure blocks run
  #   (they get one turn of the loop, enough for cleanup that does not wait) before #call
  #   returns.
  # * When every attempt has failed, the **last** failure is raised (the most recent news about
  #   the dependency). An exception that is not a StandardError or is a NameError (a bug, which
  #   another attempt would repeat: Resilience.bug?), or an attempt cancelled by something
  #   else, is raised at once and cancels the other attempts.
  # * Attempts are tasks that inherit the caller's deadline (Weft.deadline); when it passes, the
  #   call raises Weft::DeadlineExceeded. Cancelling the caller cancels the attempts.
  # * With a `budget:` (a Weft::RetryBudget, which may be shared with a Weft::Retry), each call
  #   deposits one and each extra attempt withdraws one; without budget left, no extra attempt
  #   starts. This bounds the extra load when a dependency slows down as a whole and every call
  #   would hedge.
  #
  # Thread-safe: one policy may be shared by tasks and threads. Outside a reactor #call starts
  # one (Weft.run) for the duration of the call.
  class Hedge
    # The task name of attempts.
    ATTEMPT_TASK = "Weft.hedge attempt"
    PERCENTILE = /\Ap(\d{1,2}(?:_\d+)?)\z/
    private_constant :PERCENTILE

    # @return [Integer] attempts at most
    attr_reader :max
    # @return [RetryBudget, nil]
    attr_reader :budget

    # @param after [Numeric, Symbol] seconds, or a percentile of recent latencies: :p50, :p95,
    #   :p99, :p99_9...
    # @param max [Integer] attempts at most, the first included (>= 1)
    # @param budget [RetryBudget, nil] bounds the extra attempts
    # @param window [Integer] latencies kept for a percentile (>= 1)
    # @param warmup [Integer] latencies needed before a percentile policy hedges (>= 1)
    # @raise [ArgumentError] for values outside those ranges
    def initialize(after:, max: 2, budget: nil, window: 1000, warmup: 20)
      unless max.is_a?(Integer) && max >= 1
        raise ArgumentError, "max must be an Integer >= 1 (got #{max.inspect})"
      end
      unless budget.nil? || (budget.respond_to?(:deposit) && budget.respond_to?(:withdraw))
        raise ArgumentError, "budget must be a Weft::RetryBudget or nil (got #{budget.inspect})"
      end
      [[window, "window"], [warmup, "warmup"]].each do |value, name|
        raise ArgumentError, "#{name} must be an Integer >= 1 (got #{value.inspect})" unless value.is_a?(Integer) && value >= 1
      end
      @max = max
      @budget = budget
      if after.is_a?(Symbol)
        @after = nil
        @latencies = Latencies.new(percentile(after), window, warmup)
      else
        @after = Deadline.validate(after)
        @latencies = nil
      end
    end

    # Runs the attempts; see the class comment.
    # @yieldparam attempt [Integer] 1, 2... in the order attempts start
    # @return the first successful attempt's value
    # @raise the last failure when every attempt failed
    def call(&block)
      raise ArgumentError, "Weft::Hedge#call needs a block" unless block
      @budget&.deposit
      Weft.run { race(block) }
    end

    # @return [Float, nil] seconds an attempt may run before the next starts; nil while a
    #   percentile policy is warming up
    def delay
      @after || @latencies.percentile
    end

    private

    def percentile(name)
      match = PERCENTILE.match(name.to_s)
      percent = match && Float(match[1].tr("_", "."))
      unless percent&.positive?
        raise ArgumentError, "after: must be seconds or a percentile such as :p95 or :p99_9 (got #{name.inspect})"
      end
      percent
    end

    def race(block)
      queue = Resilience::CompletionQueue.new
      starts = []
      running = 0
      hedging = true
      launch = lambda do
        starts << Timers.now
        running += 1
        queue.spawn(starts.size, starts.size, name: ATTEMPT_TASK, &block)
      end
      launch.call
      loop do
        wait = hedging && starts.size < @max ? delay : nil
        entry = wait ? queue.pop(starts.last + wait - Timers.now) : queue.pop
        unless entry
          # No answer in time: hedge, if the budget allows.
          extra_attempt? ? launch.call : hedging = false
          next
        end
        attempt, status, outcome = entry
        running -= 1
        if status == :completed
          @latencies&.record(Timers.now - starts[attempt - 1])
          queue.cancel
          return outcome
        end
        raise outcome unless status == :failed && !Resilience.bug?(outcome)
        if starts.size < @max && extra_attempt?
          launch.call
        elsif running.zero?
          raise outcome # the last failure: every attempt has failed
        end
      end
    ensure
      queue.cancel(unwind: false)
      queue.drain
    end

    # @return [Boolean] whether the budget, if any, allows one more attempt (and counts it)
    def extra_attempt?
      @budget.nil? || @budget.withdraw
    end
  end
end
