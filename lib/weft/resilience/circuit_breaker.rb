# frozen_string_literal: true

require_relative "../deadline"
require_relative "errors"
require_relative "sliding_window"
require_relative "rate_limiter"
require_relative "bulkhead"

module Weft
  # Stops calling a dependency that keeps failing or answering slowly, answers from a fallback
  # meanwhile, and lets traffic back gradually once it recovers.
  #
  #   SHARD_3 = Weft::CircuitBreaker.new("shard-3", slow_call: 0.2)
  #
  #   SHARD_3.call(fallback: ->(_error) { pool.overflow_number }) do
  #     shard3.post("/allocate", body).body   # I/O only while the breaker admits the call
  #   end
  #
  # States:
  #
  # * **closed**: every call runs. Outcomes go into a sliding window (the last `window_calls`
  #   calls, or the last `window_seconds`). Once it holds `minimum_calls`, the breaker opens when
  #   the share of failed calls reaches `failure_rate` or the share of calls slower than
  #   `slow_call` seconds reaches `slow_rate`. With `failing_for` (time windows only) it also
  #   waits until the window's oldest failed or slow call is that many seconds old: a burst of
  #   late calls shorter than that (the caller's machine stalled, a cold start after an idle
  #   spell, when the window holds few calls to outweigh it) does not open it.
  # * **open**: no call runs for `open_for` seconds; each is refused with Weft::CircuitOpen.
  # * **ramping**: then, instead of one half-open probe, the breaker admits a rising share of
  #   calls, one `ramp` step after the other over `ramp_for` seconds (5%, 25%, 50% by default),
  #   and closes after the last step. Admission is counted, not drawn at random: in a step
  #   admitting a fraction f, the n-th call is let through when at most f × n calls of that step
  #   have been, so the first call of each step is a probe and the share is exact over any run of
  #   calls. The ramp judges its own calls: once a step has seen `ramp_minimum_calls` outcomes
  #   (a step with fewer carries them into the next), the same rates as in the closed state open
  #   the breaker again.
  #
  # A refused call never runs its block: with a `fallback:` the breaker returns what the
  # fallback returns for the Weft::Rejected error, else it raises the error. A failure that
  # counts also goes to the fallback when there is one. Which exceptions count is configurable;
  # Weft::Cancelled propagates as it is and does not count, unless the deadline in force had
  # passed by then: a call cancelled because it was late (a scatter giving up on its items) is
  # judged as a Weft::DeadlineExceeded would be.
  #
  # Inside a Weft reactor a call is judged by what the reactor saw of it, not by the caller's
  # clock alone, which also runs while the caller's own reactor is busy (fibers on the CPU, a
  # GC, the process waiting for a core) and an answer that came in time lies unread. A call
  # whose deadline passed counts as a failure only if the reactor looked for ready I/O at or
  # after the deadline and the call was still waiting; a call counts as slow only if its answer
  # came after `slow_call`. Otherwise it counts as `starved` in the statistics: neither a
  # failure nor a success, kept out of the window (its exception still goes to the fallback).
  # In threads, where nothing tells, the clock decides as before. A call that started with its
  # deadline already gone is `starved` too, in a reactor or not: it never waited for the
  # dependency. See docs/resilience.md.
  #
  # One breaker may be shared by the tasks of a reactor and by threads: a mutex guards its
  # bookkeeping, never the protected call. Breakers register under their name
  # (CircuitBreaker[name], CircuitBreaker.all), which is how the server's statistics find them.
  class CircuitBreaker
    CATCH_ALL = [Exception].freeze
    CATCH_NONE = [].freeze
    # What counts as a failure unless `failure:` says otherwise: a StandardError that is not a
    # bug in the calling code (see Resilience.bug?: a NameError or NoMethodError propagates,
    # uncounted, past the fallback).
    DEFAULT_FAILURE = ->(error) { !Resilience.bug?(error) }
    # What a call cancelled after its deadline passed is judged as.
    LATE = DeadlineExceeded.new("cancelled after its deadline passed").freeze
    private_constant :CATCH_ALL, :CATCH_NONE, :LATE
    DEFAULT_RAMP = [0.05, 0.25, 0.5].freeze

    @registry = {}
    @registry_lock = Thread::Mutex.new
    # Bumped whenever a breaker leaves the registry (unregistered, or replaced by a newer one of
    # the same name), so that those who cache what CircuitBreaker.for returned (OriginBreakers)
    # can tell, with one read, that their copy may be stale.
    @registry_version = 0

    class << self
      # @api private
      # @return [Integer] changes each time a breaker leaves the registry (see @registry_version)
      attr_reader :registry_version

      # @return [CircuitBreaker, nil] the breaker registered under `name`
      def [](name)
        @registry_lock.synchronize { @registry[name.to_s] }
      end

      # @return [Array<CircuitBreaker>] every registered breaker, in creation order
      def all
        @registry_lock.synchronize { @registry.values }
      end

      # @return [Array<Hash>] #statistics of every registered breaker
      def statistics
        all.map(&:statistics)
      end

      # The breaker registered under `name`, made with `options` if there is none yet: how
      # integrations keep one breaker per dependency (an origin, say) for the whole process.
      # Options are used only by the call that makes it.
      # @return [CircuitBreaker]
      def for(name, **options)
        name = name.to_s
        @registry_lock.synchronize do
          @registry[name] ||= new(name, register: false, **options)
        end
      end

      # Removes the breaker registered under `name` (a dependency no longer called: the registry
      # keeps breakers for the life of the process otherwise). The next CircuitBreaker.for(name)
      # makes a fresh one, and so do the HTTP client's and the Faraday middleware's per-origin
      # breakers at their next call (OriginBreakers); whoever else holds the removed one may go
      # on using it.
      # @return [CircuitBreaker, nil] the breaker removed
      def unregister(name)
        @registry_lock.synchronize do
          removed = @registry.delete(name.to_s)
          @registry_version += 1 if removed
          removed
        end
      end

      # Adds a breaker to the registry; a newer breaker under the same name replaces the older.
      # @api private
      def register(breaker)
        @registry_lock.synchronize do
          @registry_version += 1 if @registry.key?(breaker.name)
          @registry[breaker.name] = breaker
        end
      end
    end

    # @return [String]
    attr_reader :name

    # @param name [String, Symbol] names the breaker in errors, statistics and the registry
    # @param window_calls [Integer] judge the last this many calls (100 unless window_seconds)
    # @param window_seconds [Numeric] or judge the calls of the last this many seconds
    # @param minimum_calls [Integer] outcomes the window must hold before it is judged
    #   (20, or the window's size if smaller)
    # @param failure_rate [Float] share of failed calls (0 < x <= 1) that opens the breaker
    # @param failing_for [Numeric, nil] seconds the trouble must have lasted before the breaker
    #   opens: from the oldest failed or slow call in the window to now (nil: no wait). Needs
    #   window_seconds, and must not exceed it.
    # @param slow_call [Numeric, nil] seconds past which a call counts as slow (nil: none is)
    # @param slow_rate [Float] share of slow calls (0 < x <= 1) that opens the breaker
    # @param open_for [Numeric] seconds the breaker stays open before ramping
    # @param ramp [Array<Float>] the shares of calls admitted while ramping, strictly rising,
    #   each in 0 < x <= 1
    # @param ramp_for [Numeric] seconds the whole ramp takes, split evenly between its steps
    # @param ramp_minimum_calls [Integer] outcomes a ramp step needs before it is judged
    # @param ramp_deadline [Numeric, nil] seconds a call admitted while ramping may take: it runs
    #   under Weft.deadline(ramp_deadline) (nil: only the caller's deadline). A dependency still
    #   sick then fails its probes fast, and the callers admitted to probe it wait that long at
    #   most, not the whole of their own deadline.
    # @param failure [Array<Class, Module>, #call] the exception classes (or modules: Weft::Error) that count as failures, or a predicate
    #   given the exception (by default every StandardError but a NameError, NoMethodError
    #   included: see DEFAULT_FAILURE; `[StandardError]` counts those too)
    # @param rate_limit [RateLimiter, nil] applied to every admitted call, in every state
    # @param bulkhead [Bulkhead, nil] bounds how many admitted calls run at once
    # @param register [Boolean] whether to add the breaker to the registry (and so to /stats)
    def initialize(name, window_calls: nil, window_seconds: nil, minimum_calls: nil, failure_rate: 0.5,
                   failing_for: nil, slow_call: nil, slow_rate: 0.5, open_for: 5, ramp: DEFAULT_RAMP, ramp_for: 6,
                   ramp_minimum_calls: 5, ramp_deadline: nil, failure: DEFAULT_FAILURE, rate_limit: nil, bulkhead: nil,
                   register: true)
      @name = name.to_s
      raise ArgumentError, "a circuit breaker needs a name" if @name.empty?
      window_calls ||= 100 unless window_seconds
      @window = SlidingWindow.build(calls: window_calls, seconds: window_seconds)
      @minimum_calls = minimum_calls || (window_calls ? [20, window_calls].min : 20)
      check_count(:minimum_calls, @minimum_calls)
      if window_calls && @minimum_calls > window_calls
        raise ArgumentError, "minimum_calls (#{@minimum_calls}) exceeds window_calls (#{window_calls}): the breaker could never open"
      end
      @failure_rate = check_fraction(:failure_rate, failure_rate)
      @failing_for = failing_for && check_failing_for(failing_for, window_seconds)
      @slow_rate = check_fraction(:slow_rate, slow_rate)
      @slow_call = slow_call && check_seconds(:slow_call, slow_call)
      @open_for = check_seconds(:open_for, open_for)
      @ramp = check_ramp(ramp)
      @step_length = check_seconds(:ramp_for, ramp_for) / @ramp.size
      @ramp_minimum_calls = check_count(:ramp_minimum_calls, ramp_minimum_calls)
      @ramp_deadline = ramp_deadline && check_seconds(:ramp_deadline, ramp_deadline)
      @failure = check_failure(failure)
      @rate_limit = check_guard(:rate_limit, rate_limit, RateLimiter)
      @bulkhead = check_guard(:bulkhead, bulkhead, Bulkhead)
      # The clock is read after a call only when something needs the time.
      @clocked = !@slow_call.nil? || !window_seconds.nil?

      @mutex = Thread::Mutex.new
      @listeners = [].freeze
      @state = :closed
      # Bumped on every change of state, so that calls admitted under an earlier state (still
      # running when the breaker opened, say) do not sway the judgement of the current one.
      @generation = 0
      @successes = @failures = @slow = @ignored = @starved = @rejected = @opened = 0
      @open_until = nil
      reset_ramp(nil)
      CircuitBreaker.register(self) if register
    end

    # Runs the block if the breaker admits the call, recording how it went.
    #
    # @param fallback [#call, nil] given the error when the call is refused (Weft::Rejected:
    #   CircuitOpen, RateLimited, BulkheadFull) or fails with an exception that counts; its
    #   value is returned instead. Whatever it raises propagates.
    # @param failed_if [#call, nil] given the block's value: true counts the call as a failure,
    #   though the value is still returned (an HTTP response with a 5xx status, say)
    # @param deadline [Deadline, nil] a deadline of the call's own that is not the caller's
    #   Weft.deadline (an HTTP request's `deadline:`, which started before the breaker): the
    #   rate limit's and the bulkhead's waits end by it too, as they do by Weft.remaining. It
    #   bounds only those waits: the call is judged as without it (see #verdict).
    # @return the block's value, or the fallback's
    # @raise [Weft::Rejected] when refused without a fallback
    def call(fallback: nil, failed_if: nil, deadline: nil)
      probing = false
      if @state.equal?(:closed)
        generation = @generation
      else
        generation = admit
        return refuse(generation, fallback) unless generation.is_a?(Integer)
        probing = @ramp_deadline && @state.equal?(:ramping)
      end
      held = false
      if @rate_limit || @bulkhead
        refusal = enter_guards(deadline)
        return refuse(refusal, fallback) if refusal
        held = !@bulkhead.nil?
      end
      outer = $!
      started = Process.clock_gettime(Process::CLOCK_MONOTONIC) if @slow_call
      # A call that starts after its deadline has passed cannot wait for the dependency at all:
      # if that deadline ends it, the caller was late (see #verdict). Only known now. (The clock
      # read inline rather than Deadline#expired?: 150 ns a call under a deadline on Ruby 3.1
      # instead of 240, 43 on 3.3 + YJIT.)
      in_force = Deadline.current
      overdue = in_force ? Process.clock_gettime(Process::CLOCK_MONOTONIC) >= in_force.at : false
      finished = false
      probe = nil # the deadline a call admitted while ramping runs under (ramp_deadline)
      begin
        result = probing ? Weft.deadline(@ramp_deadline) { |deadline| probe = deadline; yield } : yield
        finished = true
      rescue *(fallback ? CATCH_ALL : CATCH_NONE) => error
        # Caught only to be handed to the fallback, if it counts.
        finished = true
        if held
          held = false
          @bulkhead.release # before the fallback runs: it needs no slot
        end
        # A cancellation propagates even when it counts (see #verdict): the task must end.
        raise error unless failed(error, generation, started, probe, overdue) && !error.is_a?(Cancelled)
        return fallback.call(error)
      ensure
        @bulkhead.release if held
        # Without a fallback, a failure is recorded here on its way out: catching and re-raising
        # it would cost more than the rest of the breaker (a re-raise takes microseconds on Ruby
        # 3.1). Leaving the block by return, break or throw (no new exception) is a success.
        ended(($! unless $!.equal?(outer)), generation, started, probe, overdue) unless finished
      end
      if failed_if&.call(result)
        count_failure(generation, started)
      else
        succeeded(generation, started)
      end
      result
    end

    # Calls the block on every change of state, with the breaker and the states before and
    # after (:closed, :open, :ramping). It runs in the fiber whose call (or statistics read)
    # noticed the change, after the breaker's lock is released; what it raises is logged.
    # @return [self]
    def on_change(&block)
      raise ArgumentError, "on_change needs a block" unless block
      @mutex.synchronize { @listeners = [*@listeners, block].freeze }
      self
    end

    # @return [Symbol] :closed, :open or :ramping
    def state
      read { @state }
    end

    # @return [Float] the share of calls admitted now: 1.0 closed, 0.0 open, the step's while
    #   ramping
    def admitted_fraction
      read { fraction }
    end

    # @return [Hash] state and counters. `calls` counts the calls that have ended or were
    #   refused: successes + failures + ignored (exceptions that do not count) + starved (calls
    #   late by their caller's doing, see the class comment) + rejected. `slow` counts the calls
    #   slower than slow_call, whether they succeeded or failed; `opened` how often the breaker
    #   opened.
    def statistics
      read do
        { name: @name, state: @state, admitted_fraction: fraction,
          calls: @successes + @failures + @ignored + @starved + @rejected, successes: @successes,
          failures: @failures, slow: @slow, ignored: @ignored, starved: @starved, rejected: @rejected,
          opened: @opened }
      end
    end

    # @return [String] the name and state, for logs and the console
    def inspect
      "#<#{self.class} #{@name.inspect} #{@state}>"
    end

    private

    # Admission when not closed. @return [Integer, CircuitOpen] the generation, or the refusal
    def admit
      now = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      change = nil
      admission = @mutex.synchronize do
        change = advance(now)
        case @state
        when :closed
          @generation
        when :open
          count_refusal
          CircuitOpen.new(@name, :open, @open_until - now)
        else
          @ramp_seen += 1
          if @ramp_admitted < @ramp[@step] * @ramp_seen
            @ramp_admitted += 1
            @generation
          else
            count_refusal
            CircuitOpen.new(@name, :ramping)
          end
        end
      end
      notify(change) if change
      admission
    end

    # Takes a token and a bulkhead slot, each waiting no longer than its own timeout, the
    # caller's Weft.deadline (the guards see that one themselves) and the call's `deadline`. A
    # token taken before the bulkhead refuses stays spent: the limiter bounds attempts, not
    # successes.
    # @param deadline [Deadline, nil] see #call
    # @return [Exception, nil] why a guard refused the call
    def enter_guards(deadline)
      refusal =
        if @rate_limit && !@rate_limit.acquire(timeout: guard_wait(@rate_limit.timeout, deadline))
          RateLimited.new("circuit breaker #{@name.inspect}: rate limit of #{@rate_limit.rate}/s reached")
        elsif @bulkhead && (outcome = @bulkhead.acquire(timeout: guard_wait(@bulkhead.timeout, deadline))) != :acquired
          BulkheadFull.new("circuit breaker #{@name.inspect}: #{@bulkhead.refusal(outcome)}")
        end
      @mutex.synchronize { count_refusal } if refusal
      refusal
    end

    # @param timeout [Numeric, nil] a guard's own wait (nil: none)
    # @param deadline [Deadline, nil] the call's (see #call)
    # @return [Numeric, nil] the wait, cut short by the deadline
    def guard_wait(timeout, deadline)
      deadline ? deadline.bound(timeout) : timeout
    end

    def refuse(error, fallback)
      raise error unless fallback
      fallback.call(error)
    end

    def succeeded(generation, started)
      now = Process.clock_gettime(Process::CLOCK_MONOTONIC) if @clocked
      slow = @slow_call && now - started > @slow_call
      # Slow only in its caller's hands: no evidence about the dependency either way.
      return count_unjudged(:starved) if slow && !late_by_dependency?(started + @slow_call, started, false)
      change = @mutex.synchronize do
        @successes += 1
        @slow += 1 if slow
        judge(slow ? SlidingWindow::SLOW : 0, now, generation)
      end
      notify(change) if change
    end

    # Records a call that left its block early: by an exception, or (error nil) by return,
    # break or throw, which count as success.
    def ended(error, generation, started, probe, overdue)
      error ? failed(error, generation, started, probe, overdue) : succeeded(generation, started)
    end

    # Records a call that raised.
    # @param probe [Deadline, nil] the ramp_deadline the call ran under
    # @param overdue [Boolean] whether the deadline in force had passed when the call started
    # @return [Boolean] whether the exception goes to the fallback: it counts, or it would have
    #   counted had the caller not been late
    def failed(error, generation, started, probe, overdue)
      verdict = verdict(error, probe, overdue)
      case verdict
      when :ignored, :starved
        count_unjudged(verdict)
        verdict.equal?(:starved)
      else
        count_failure(generation, started, verdict.equal?(:expired))
        true
      end
    end

    # Records a call that failed: it raised an exception that counts, or failed_if rejected its value.
    # @param waiting [Boolean] whether it failed because its deadline passed while it waited
    def count_failure(generation, started, waiting = false)
      now = Process.clock_gettime(Process::CLOCK_MONOTONIC) if @clocked
      slow = @slow_call && now - started > @slow_call && late_by_dependency?(started + @slow_call, started, waiting)
      change = @mutex.synchronize do
        @failures += 1
        @slow += 1 if slow
        judge(SlidingWindow::FAILED | (slow ? SlidingWindow::SLOW : 0), now, generation)
      end
      notify(change) if change
    end

    # Counts a call that does not judge the dependency: :ignored or :starved (see #verdict).
    def count_unjudged(verdict)
      @mutex.synchronize { verdict.equal?(:starved) ? @starved += 1 : @ignored += 1 }
      nil
    end

    # What a call that raised `error` says about the dependency:
    # * :ignored, an exception that does not count (see `failure:`), or a cancellation before
    #   the deadline;
    # * :expired, its deadline passed while the reactor watched for the answer: the answer was
    #   late, a failure;
    # * :starved, its deadline passed, but the reactor last looked for the answer before that
    #   and was busy since (see #late_by_dependency?): the answer may have been in time; or the
    #   deadline had passed before the call started (`overdue`), so that it never had time to
    #   wait for the dependency (the HTTP client then fails without connecting), in a reactor
    #   or not;
    # * :failed, any other exception that counts.
    # A cancellation after the deadline in force had passed (a scatter giving up on its late
    # items) is judged as the Weft::DeadlineExceeded it stands for: whoever noticed the
    # deadline first, the call's own timer or the scatter, is a matter of timer order.
    # @return [Symbol]
    def verdict(error, probe, overdue)
      deadline = nil
      if error.is_a?(DeadlineExceeded) || error.is_a?(Cancelled)
        deadline = probe || Deadline.current
        deadline = nil unless deadline&.expired?
        if error.is_a?(Cancelled)
          return :ignored unless deadline
          error = LATE
        end
      end
      return :ignored unless counts?(error)
      # A DeadlineExceeded with no expired deadline around the call: a limit set inside it (a
      # Weft.deadline in the block, the HTTP client's own deadline:), judged by the clock.
      return :failed unless deadline
      return :starved if overdue
      late_by_dependency?(deadline.at, nil, true) ? :expired : :starved
    end

    # Whether a call that was still unfinished at `moment` was so by the dependency's doing, as
    # far as the reactor can tell. A call still waiting when its time ran out (waiting: true)
    # was, if the reactor looked for ready I/O at or after the moment and the call was not woken
    # (Scheduler#watched?). A call that got its answer was, if the answer came after the moment
    # (Scheduler#readiness_floor since the call started). Otherwise the answer may have come in
    # time and waited for the caller: a reactor busy running fibers, or a process waiting for a
    # core. Outside a Weft reactor (threads, a blocking fiber, another fiber scheduler) nothing
    # tells: the call is judged by the clock alone, as a breaker always did.
    def late_by_dependency?(moment, started, waiting)
      scheduler = Weft.scheduler
      return true if scheduler.nil? || Fiber.current.blocking?
      return scheduler.watched?(moment) if waiting
      floor = scheduler.readiness_floor(started)
      !floor.nil? && floor >= moment
    end

    def counts?(error)
      return @failure.call(error) ? true : false unless @failure.is_a?(Array)
      @failure.any? { |kind| error.is_a?(kind) }
    end

    # Records an outcome for judging, unless the call was admitted under an earlier state.
    # Holding the lock.
    # @return [Array(Symbol, Symbol), nil] the change of state it caused
    def judge(outcome, now, generation)
      return unless generation == @generation
      case @state
      when :closed
        @window.record(outcome, now)
        return if outcome.zero? || !tripped?(@window.calls, @window.failures, @window.slow, @minimum_calls)
        return if @failing_for && @window.troubled_for(now) < @failing_for
      when :ramping
        @ramp_calls += 1
        @ramp_failures += 1 if outcome.anybits?(SlidingWindow::FAILED)
        @ramp_slow += 1 if outcome.anybits?(SlidingWindow::SLOW)
        return unless tripped?(@ramp_calls, @ramp_failures, @ramp_slow, @ramp_minimum_calls)
      else
        return
      end
      change_to(:open, now || Process.clock_gettime(Process::CLOCK_MONOTONIC))
    end

    def tripped?(calls, failures, slow, minimum)
      calls >= minimum && (failures >= @failure_rate * calls || slow >= @slow_rate * calls)
    end

    # Moves on with time: open to ramping once open_for has passed, from ramp step to ramp step,
    # and to closed after the last. Holding the lock.
    # @return [Array(Symbol, Symbol), nil] the change of state, if any
    def advance(now)
      case @state
      when :open
        change_to(:ramping, now) if now >= @open_until
      when :ramping
        step = ((now - @ramp_started) / @step_length).floor
        return if step == @step
        return change_to(:closed, now) if step >= @ramp.size
        @step = step
        @ramp_seen = @ramp_admitted = 0
        # A step with too few outcomes to judge hands them on to the next.
        @ramp_calls = @ramp_failures = @ramp_slow = 0 if @ramp_calls >= @ramp_minimum_calls
        nil
      end
    end

    def change_to(state, now)
      from = @state
      @state = state
      @generation += 1
      case state
      when :open
        @opened += 1
        @open_until = now + @open_for
      when :ramping
        reset_ramp(now)
      when :closed
        @window.clear
      end
      [from, state]
    end

    def reset_ramp(now)
      @ramp_started = now
      @step = 0
      @ramp_seen = @ramp_admitted = 0
      @ramp_calls = @ramp_failures = @ramp_slow = 0
    end

    def count_refusal
      @rejected += 1
    end

    def fraction
      case @state
      when :closed then 1.0
      when :open then 0.0
      else @ramp[@step]
      end
    end

    # Runs the block under the lock after bringing the state up to date.
    def read
      change = nil
      value = @mutex.synchronize do
        change = advance(Process.clock_gettime(Process::CLOCK_MONOTONIC))
        yield
      end
      notify(change) if change
      value
    end

    def notify((from, to))
      @listeners.each do |listener|
        listener.call(self, from, to)
      rescue StandardError => e
        Weft.logger.error("circuit breaker #{@name.inspect}: on_change callback failed: #{e.class}: #{e.message}")
      end
    end

    def check_count(option, value)
      return value if value.is_a?(Integer) && value >= 1
      raise ArgumentError, "#{option} must be an Integer >= 1 (got #{value.inspect})"
    end

    def check_failing_for(seconds, window_seconds)
      raise ArgumentError, "failing_for needs window_seconds: a window of calls has no time span" unless window_seconds
      seconds = check_seconds(:failing_for, seconds)
      return seconds if seconds <= window_seconds
      raise ArgumentError, "failing_for (#{seconds}) exceeds window_seconds (#{window_seconds}): the breaker could never open"
    end

    def check_fraction(option, value)
      return value.to_f if value.is_a?(Numeric) && value.positive? && value <= 1
      raise ArgumentError, "#{option} must be a fraction in 0 < x <= 1 (got #{value.inspect})"
    end

    def check_seconds(option, value)
      return value.to_f if value.is_a?(Numeric) && value.positive? && value.finite?
      raise ArgumentError, "#{option} must be a positive number of seconds (got #{value.inspect})"
    end

    def check_ramp(ramp)
      unless ramp.is_a?(Array) && !ramp.empty?
        raise ArgumentError, "ramp must be a non-empty Array of fractions (got #{ramp.inspect})"
      end
      ramp.each { |share| check_fraction(:ramp, share) }
      unless ramp.each_cons(2).all? { |a, b| a < b }
        raise ArgumentError, "ramp must rise strictly from step to step (got #{ramp.inspect})"
      end
      ramp.map(&:to_f).freeze
    end

    def check_failure(failure)
      return failure if failure.respond_to?(:call)
      if failure.is_a?(Array) && !failure.empty? && failure.all? { |kind| exception_kind?(kind) }
        return failure.dup.freeze
      end
      raise ArgumentError, "failure must be a non-empty Array of exception classes (or modules such as Weft::Error) " \
                           "or a predicate (got #{failure.inspect})"
    end

    # An exception class, or a module exception classes include (Weft::Error, Weft::HTTP::Error).
    def exception_kind?(kind)
      kind.is_a?(Class) ? kind <= Exception : kind.is_a?(Module)
    end

    def check_guard(option, guard, kind)
      return guard if guard.nil? || guard.is_a?(kind)
      raise ArgumentError, "#{option} must be a #{kind} (got #{guard.inspect})"
    end
  end
end
