# frozen_string_literal: true

require_relative "../../weft"
require_relative "retry_budget"

module Weft
  class << self
    # Calls the block, retrying it on transient errors with jittered exponential backoff, never
    # past the caller's deadline and within a retry budget. See Weft::Retry. Without `budget:`
    # it draws on RetryBudget.default, which every such call in the process shares.
    #
    #   Weft.deadline(0.5) { Weft.retry(attempts: 3) { |attempt| client.get("/quote").body } }
    # @param budget [RetryBudget, nil] the budget retries draw on; nil: no limit
    # @param options [Hash] Weft::Retry.new's attempts:, base:, cap:, on:
    # @yieldparam attempt [Integer] 1 for the first call, 2 for the first retry...
    # @return the block's value
    # @raise the error of the last attempt: one not retried, or the last when attempts, the
    #   budget or the deadline ran out
    def retry(budget: RetryBudget.default, **options, &block)
      Retry.new(budget: budget, **options).call(&block)
    end
  end

  # A retry policy: which errors to retry, how many attempts, how long to back off, and the
  # budget that keeps retries from multiplying the load on a dependency that is down. Build one
  # per dependency and share it; it is immutable apart from its budget, which is thread-safe.
  #
  #   QUOTES = Weft::Retry.new(attempts: 4, base: 0.025, cap: 0.5)
  #   QUOTES.call { |attempt| quotes.get("/quote/#{id}").body }
  #
  # * **Backoff: "full jitter".** Before retry n (n = 1 after the first attempt), the policy
  #   sleeps a random time between 0 and min(cap, base × 2^(n-1)). Spreading retries over the
  #   whole interval, rather than around its end, is what keeps clients that failed together
  #   from retrying together.
  # * **The deadline wins.** When the backoff would end at, past or within 2 ms of the caller's
  #   deadline (Weft.remaining), there is no time for another attempt: the last error is raised
  #   at once, instead of sleeping into a Weft::DeadlineExceeded. Should the deadline still
  #   strike during a backoff (a busy reactor wakes a sleep late), the last error is raised too.
  # * **The budget.** Each call deposits one into the budget; each retry withdraws one, and when
  #   the budget is spent the last error is raised at once. See Weft::RetryBudget.
  # * **What retries.** By default the transient failures of a connection: Weft::TimeoutError
  #   (and so the HTTP client's timeouts, and a Weft::DeadlineExceeded of a deadline set inside
  #   the block), the refused/reset/unreachable Errno errors, EOFError, and the HTTP client's
  #   Weft::HTTP::ConnectionError apart from a failed certificate verification. `on:` replaces
  #   the list: exception classes (matched with ===), or a callable `->(error) { ... }`.
  #   Weft::Cancelled, SignalException and SystemExit are never retried.
  # * Every other exception is raised at once, untouched.
  #
  # Retry only what is safe to run twice (reads, idempotent writes): the first attempt may have
  # done its work before its error reached you.
  #
  # Works inside a reactor (the backoff parks only the calling fiber) and in a plain thread.
  class Retry
    # Errno classes for a connection that could not be made or broke.
    CONNECTION_ERRNOS = [
      Errno::ECONNREFUSED, Errno::ECONNRESET, Errno::ECONNABORTED, Errno::EPIPE, Errno::ETIMEDOUT,
      Errno::EHOSTUNREACH, Errno::ENETUNREACH, Errno::EADDRNOTAVAIL
    ].freeze
    # Never retried, whatever `on:` says: stopping is not failing.
    NEVER = [Cancelled, SignalException, SystemExit].freeze
    # A sleep that would end this close to the deadline ends with it: the reactor's timers fire
    # with millisecond resolution, and no attempt fits in what would be left anyway.
    DEADLINE_MARGIN = 0.002
    private_constant :NEVER, :DEADLINE_MARGIN

    # The default of `on:`: whether `error` is a transient connection failure.
    DEFAULT_ON = lambda do |error|
      case error
      when Weft::TimeoutError, EOFError, *CONNECTION_ERRNOS then true
      else
        # The HTTP client is a sibling component: its errors count only when it is loaded.
        http = Weft.const_defined?(:HTTP, false) && Weft::HTTP
        !!(http && http.const_defined?(:ConnectionError, false) &&
           error.is_a?(http::ConnectionError) && !error.is_a?(http::TLSVerificationError))
      end
    end

    # @return [Integer] attempts at most, the first included
    attr_reader :attempts
    # @return [RetryBudget, nil]
    attr_reader :budget

    # @param attempts [Integer] attempts at most, the first included (>= 1)
    # @param base [Numeric] seconds: the backoff ceiling before the first retry (>= 0)
    # @param cap [Numeric, nil] seconds: the ceiling never grows past this (>= base); nil: no
    #   cap of its own (attempts and the deadline still bound the sleeps)
    # @param on [Array<Module>, #call, nil] which errors to retry; nil: DEFAULT_ON
    # @param budget [RetryBudget, nil] shared cap on retries; nil: none (by default, a budget of
    #   the policy's own, so that every caller sharing the policy shares it)
    # @raise [ArgumentError] for values outside those ranges
    def initialize(attempts: 3, base: 0.05, cap: nil, on: nil, budget: RetryBudget.new)
      unless attempts.is_a?(Integer) && attempts >= 1
        raise ArgumentError, "attempts must be an Integer >= 1 (got #{attempts.inspect})"
      end
      @base = seconds(base, "base")
      @cap = cap && seconds(cap, "cap")
      raise ArgumentError, "cap (#{cap}) must not be below base (#{base})" if @cap && @cap < @base
      unless budget.nil? || (budget.respond_to?(:deposit) && budget.respond_to?(:withdraw))
        raise ArgumentError, "budget must be a Weft::RetryBudget or nil (got #{budget.inspect})"
      end
      @attempts = attempts
      @on = retryable(on)
      @budget = budget
      freeze
    end

    # Calls the block until it returns, retrying errors the policy retries while attempts,
    # time and budget are left.
    # @yieldparam attempt [Integer] 1 for the first attempt, 2 for the first retry...
    # @return the block's value
    # @raise the last error when the policy gives up, any other error at once
    def call
      raise ArgumentError, "Weft::Retry#call needs a block" unless block_given?
      @budget&.deposit
      attempt = 1
      begin
        yield attempt
      rescue Exception => e # rubocop:disable Lint/RescueException
        raise unless attempt < @attempts && retries?(e)
        delay = backoff(attempt)
        left = Weft.remaining
        raise if left && delay + DEADLINE_MARGIN >= left
        raise if @budget && !@budget.withdraw
        raise unless back_off(delay)
        attempt += 1
        retry
      end
    end

    # @param retry_number [Integer] 1 for the first retry
    # @return [Float] seconds to sleep before it: random, from 0 up to the ceiling
    def backoff(retry_number)
      ceiling = @base * (2**(retry_number - 1))
      ceiling = @cap if @cap && ceiling > @cap
      rand * ceiling
    end

    # @return [Boolean] whether the policy retries `error` (attempts, time and budget allowing)
    def retries?(error)
      NEVER.none? { |kind| error.is_a?(kind) } && @on.call(error) ? true : false
    end

    private

    # Sleeps `delay` seconds.
    # @return [Boolean] false if the caller's deadline struck meanwhile (a loaded machine can
    #   wake a sleep late), so that the caller gets the error that made it retry rather than a
    #   Weft::DeadlineExceeded that says less
    def back_off(delay)
      sleep delay if delay.positive?
      true
    rescue DeadlineExceeded
      raise unless Deadline.current&.expired?
      false
    end

    def seconds(value, name)
      return value if value.is_a?(Numeric) && value.real? && value.finite? && value >= 0
      raise ArgumentError, "#{name} must be a finite number of seconds >= 0 (got #{value.inspect})"
    end

    def retryable(on)
      return DEFAULT_ON if on.nil?
      return on if on.respond_to?(:call)
      kinds = Array(on)
      unless !kinds.empty? && kinds.all?(Module)
        raise ArgumentError, "on: must be exception classes or a callable (got #{on.inspect})"
      end
      kinds = kinds.dup.freeze
      ->(error) { kinds.any? { |kind| kind === error } } # rubocop:disable Style/CaseEquality
    end
  end
end
