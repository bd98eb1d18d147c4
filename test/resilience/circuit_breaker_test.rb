# frozen_string_literal: true

require_relative "../test_helper"
require "weft/resilience"

class CircuitBreakerTest < Minitest::Test
  Boom = Class.new(StandardError)

  def breaker(**options)
    defaults = { window_calls: 10, minimum_calls: 10, open_for: 0.2, ramp_for: 0.6, register: false }
    Weft::CircuitBreaker.new("test-#{name}", **defaults, **options)
  end

  # Runs `n` calls that fail (raise Boom) and returns how many reached the block.
  def fail_calls(breaker, n)
    ran = 0
    n.times do
      breaker.call(fallback: ->(_) {}) do
        ran += 1
        raise Boom
      end
    end
    ran
  end

  def succeed_calls(breaker, n)
    ran = 0
    n.times { breaker.call(fallback: ->(_) {}) { ran += 1 } }
    ran
  end

  def wait_for(timeout = 5)
    deadline = Weft::Timers.now + timeout
    until (value = yield)
      flunk "condition not met within #{timeout}s" if Weft::Timers.now > deadline
      sleep 0.005
    end
    value
  end

  def test_opens_when_the_failure_rate_reaches_the_threshold
    b = breaker(failure_rate: 0.5)
    succeed_calls(b, 5)
    fail_calls(b, 4)
    assert_equal :closed, b.state # 4 of 9, and fewer than minimum_calls anyway
    fail_calls(b, 1)
    assert_equal :open, b.state # 5 of 10
    stats = b.statistics
    assert_equal [10, 5, 5, 1], stats.values_at(:calls, :successes, :failures, :opened)
  end

  def test_stays_closed_below_the_failure_rate
    b = breaker(failure_rate: 0.5)
    succeed_calls(b, 6)
    fail_calls(b, 4)
    succeed_calls(b, 10)
    assert_equal :closed, b.state
  end

  def test_stays_closed_below_minimum_calls
    b = breaker(window_calls: 20, minimum_calls: 10)
    assert_equal 9, fail_calls(b, 9)
    assert_equal :closed, b.state
    fail_calls(b, 1)
    assert_equal :open, b.state
  end

  def test_opens_on_the_slow_call_rate
    b = breaker(window_calls: 4, minimum_calls: 4, slow_call: 0.03, slow_rate: 0.5)
    b.call { :fast }
    b.call { :fast }
    b.call { sleep 0.06 }
    assert_equal :closed, b.state
    assert_equal :slow, b.call { sleep 0.06; :slow } # succeeds, but slowly: 2 of 4 slow
    assert_equal :open, b.state
    stats = b.statistics
    assert_equal [4, 0, 2], stats.values_at(:successes, :failures, :slow)
  end

  def test_never_runs_the_block_while_open
    b = breaker(open_for: 30)
    fail_calls(b, 10)
    assert_equal 0, fail_calls(b, 100)
    assert_equal 0, succeed_calls(b, 100)

    error = nil
    assert_equal :overflow, b.call(fallback: ->(e) { error = e; :overflow }) { flunk "ran while open" }
    assert_instance_of Weft::CircuitOpen, error
    assert_equal "test-#{name}", error.breaker
    assert_equal :open, error.state
    assert_in_delta 30, error.retry_after, 1

    raised = assert_raises(Weft::CircuitOpen) { b.call { flunk "ran while open" } }
    assert_kind_of Weft::Rejected, raised
    assert_equal 202, b.statistics[:rejected]
  end

  def test_ramp_admits_the_configured_fractions_then_closes
    b = breaker(open_for: 0.1, ramp: [0.05, 0.25, 0.5], ramp_for: 0.9)
    fail_calls(b, 10)
    sleep 0.1
    [0.05, 0.25, 0.5].each do |fraction|
      wait_for { b.admitted_fraction == fraction }
      admitted = succeed_calls(b, 200)
      # Counted admission gives exactly ceil(fraction * 200) within one step; a step boundary
      # crossed mid-loop (a slow machine) can shift a few.
      assert_in_delta fraction * 200, admitted, 4, "step #{fraction}"
    end
    wait_for { b.state == :closed }
    assert_equal 100, succeed_calls(b, 100)
    assert_equal 1, b.statistics[:opened]
  end

  def test_ramp_admits_the_first_call_of_each_step
    b = breaker(open_for: 0.05, ramp: [0.01], ramp_for: 5)
    fail_calls(b, 10)
    sleep 0.06
    assert_equal [1, 0, 0], Array.new(3) { succeed_calls(b, 1) } # a probe at once, then 1 in 100
  end

  def test_failures_during_the_ramp_open_it_again
    b = breaker(open_for: 0.1, ramp: [0.5, 1.0], ramp_for: 10, ramp_minimum_calls: 4)
    changes = []
    b.on_change { |_, from, to| changes << [from, to] }
    fail_calls(b, 10)
    sleep 0.1
    assert_equal :ramping, b.state
    assert_equal 4, fail_calls(b, 7) # half of 7 admitted, rounding up: the 4th trips it
    assert_equal :open, b.state
    assert_equal 0, fail_calls(b, 10)
    assert_equal 2, b.statistics[:opened]
    assert_equal [%i[closed open], %i[open ramping], %i[ramping open]], changes
  end

  def test_ramp_deadline_cuts_probes_short_and_a_sick_dependency_reopens_the_breaker
    b = breaker(open_for: 0.05, ramp: [1.0], ramp_for: 10, ramp_minimum_calls: 1, ramp_deadline: 0.05)
    Weft.run do
      # Closed: a call takes as long as it takes.
      assert_equal :slow_but_fine, b.call { sleep 0.15; :slow_but_fine }
      fail_calls(b, 10)
      sleep 0.06
      assert_equal :ramping, b.state
      # Ramping: the probe still hangs, and is ended at the ramp deadline instead of in 5 s.
      error = assert_elapsed_under(1) { assert_raises(Weft::DeadlineExceeded) { b.call { sleep 5 } } }
      assert_match(/0\.05/, error.message)
      assert_equal :open, b.state
    end
  end

  def test_ramp_with_too_few_calls_to_judge_carries_them_into_the_next_step
    b = breaker(open_for: 0.05, ramp: [0.5, 1.0], ramp_for: 0.4, ramp_minimum_calls: 3)
    fail_calls(b, 10)
    sleep 0.06
    assert_equal 1, fail_calls(b, 2) # 1 failure judged of 3 needed
    wait_for { b.admitted_fraction == 1.0 }
    fail_calls(b, 2) # 3 failures now
    assert_equal :open, b.state
  end

  def test_on_change_reports_every_transition_and_survives_a_failing_callback
    b = breaker(open_for: 0.05, ramp: [1.0], ramp_for: 0.05)
    changes = []
    b.on_change { |breaker, from, to| changes << [breaker, from, to] }
    b.on_change { |_, _, _| raise "callback bug" }
    log = StringIO.new
    previous = Weft.logger
    Weft.logger = Logger.new(log)
    begin
      fail_calls(b, 10)
      wait_for { b.state == :closed }
    ensure
      Weft.logger = previous
    end
    assert_equal [[b, :closed, :open], [b, :open, :ramping], [b, :ramping, :closed]], changes
    assert_match(/on_change callback failed: RuntimeError: callback bug/, log.string)
  end

  def test_fallback_gets_counted_failures_too
    b = breaker
    seen = nil
    assert_equal :overflow, b.call(fallback: ->(e) { seen = e; :overflow }) { raise Boom, "shard down" }
    assert_instance_of Boom, seen
    assert_equal 1, b.statistics[:failures]
  end

  def test_a_failing_fallback_raises_its_own_error
    b = breaker(open_for: 30)
    fail_calls(b, 10)
    error = assert_raises(KeyError) { b.call(fallback: ->(_) { raise KeyError, "no overflow number" }) { 1 } }
    assert_equal "no overflow number", error.message
    error = assert_raises(KeyError) do
      breaker.call(fallback: ->(_) { raise KeyError, "from fallback" }) { raise Boom, "from call" }
    end
    assert_equal "from fallback", error.message
    assert_instance_of Boom, error.cause
  end

  def test_exceptions_that_do_not_count_propagate_uncounted
    b = breaker(failure: [IOError], minimum_calls: 1, window_calls: 1)
    fallback_ran = false
    3.times do
      assert_raises(ArgumentError) { b.call(fallback: ->(_) { fallback_ran = true }) { raise ArgumentError } }
    end
    refute fallback_ran
    assert_equal :closed, b.state
    assert_equal [3, 0, 3], b.statistics.values_at(:calls, :failures, :ignored)
    b.call(fallback: ->(_) {}) { raise IOError }
    assert_equal :open, b.state
  end

  # A NameError (NoMethodError included) in the block is a bug in the calling code, a typo or a
  # method called on nil: handed to the fallback it would hide behind degraded answers, and
  # counted it would open the breaker of a healthy dependency. Unless failure: says it counts.
  def test_a_name_error_is_a_bug_that_propagates_uncounted_past_the_fallback
    b = breaker(minimum_calls: 1, window_calls: 1)
    fallback_ran = false
    assert_raises(NoMethodError) { b.call(fallback: ->(_) { fallback_ran = true }) { nil.upcase } }
    assert_raises(NameError) { b.call(fallback: ->(_) { fallback_ran = true }) { Object.const_get(:NoSuchShard) } }
    refute fallback_ran, "the fallback stood in for a bug"
    assert_equal [:closed, 0, 2], [b.state, *b.statistics.values_at(:failures, :ignored)]
    assert_equal :fallback, b.call(fallback: ->(_) { :fallback }) { raise Boom }, "other errors still count"
    assert_equal :open, b.state
    counting = breaker(failure: [StandardError], minimum_calls: 1, window_calls: 1)
    assert_equal :fallback, counting.call(fallback: ->(_) { :fallback }) { nil.upcase }
    assert_equal :open, counting.state
  end

  def test_a_failure_without_fallback_propagates_untouched_and_counts
    b = breaker(minimum_calls: 1, window_calls: 1)
    raised = Boom.new("shard down")
    error = assert_raises(Boom) { b.call { raise raised } }
    assert_same raised, error
    assert_match(/circuit_breaker_test\.rb/, error.backtrace.first)
    assert_equal :open, b.state
  end

  def test_leaving_the_block_by_return_break_or_throw_is_a_success
    b = breaker(minimum_calls: 1, window_calls: 1)
    early = ->(breaker) { [1].each { breaker.call { return :returned } } }
    assert_equal :returned, early.call(b)
    assert_equal :broke, b.call { break :broke }
    assert_equal :thrown, catch(:done) { b.call { throw :done, :thrown } }
    begin
      raise Boom, "handled before the call"
    rescue Boom
      catch(:out) { b.call { throw :out } } # $! is set by the outer rescue, not by the block
    end
    assert_equal [4, 4, 0], b.statistics.values_at(:calls, :successes, :failures)
    assert_equal :closed, b.state
  end

  def test_failure_predicate
    b = breaker(failure: ->(e) { e.message.start_with?("5") }, minimum_calls: 2, window_calls: 2)
    assert_raises(Boom) { b.call { raise Boom, "404" } }
    assert_raises(Boom) { b.call { raise Boom, "503" } }
    assert_equal [1, 1], b.statistics.values_at(:failures, :ignored)
  end

  def test_cancellation_never_counts_and_propagates
    b = breaker(failure: [Exception], minimum_calls: 1, window_calls: 1)
    fallback_ran = false
    Weft.run do
      task = Weft.spawn { b.call(fallback: ->(_) { fallback_ran = true }) { sleep 10 } }
      sleep 0.01
      task.cancel
      assert_nil task.wait
      assert task.cancelled?
    end
    refute fallback_ran
    assert_equal :closed, b.state
    assert_equal [1, 0, 1], b.statistics.values_at(:calls, :failures, :ignored)
  end

  # A scatter whose deadline passes cancels its late items. Here a CPU hog holds the reactor past
  # the deadline before the items start, so each call starts with its deadline gone and the
  # scatter's timer reaches it as Weft::Cancelled, not Weft::DeadlineExceeded: past the deadline
  # that is a late call, not one to ignore, but one that never had time to wait for the
  # dependency: the caller was late (starved), not the dependency (failed). (Calls that start in
  # time and are ended by their deadline while the reactor watches are failures:
  # circuit_breaker_starved_test.rb.)
  def test_a_late_started_call_cancelled_after_its_deadline_is_starved_not_ignored
    b = breaker(minimum_calls: 3, window_calls: 3)
    fallback_errors = []
    results = nil
    Weft.run do
      Weft.spawn do
        started = Weft::Timers.now
        nil while Weft::Timers.now - started < 0.1 # holds the reactor past the deadline
      end
      results = Weft.scatter([1, 2, 3], deadline: 0.02, fallback: ->(_item, error) { error.class }) do
        b.call(fallback: ->(error) { fallback_errors << error }) { sleep 1 }
      end
    end
    assert_equal [Weft::DeadlineExceeded] * 3, results
    assert_empty fallback_errors, "a cancelled call must propagate, not go to the fallback"
    assert_equal [3, 0, 0, 3], b.statistics.values_at(:calls, :failures, :ignored, :starved)
    assert_equal :closed, b.state
  end

  # Work that outlived its deadline (rescued, it goes on) and then calls a dependency: each call
  # ends at once by the deadline that passed before it started. The caller was late, not the
  # dependency; the calls still go to the fallback, as a failure would.
  def test_a_call_that_starts_past_its_deadline_does_not_count_against_the_dependency
    b = breaker(minimum_calls: 3, window_calls: 3)
    ran = 0
    Weft.run do
      Weft.deadline(0.02) do
        begin
          sleep 1
        rescue Weft::DeadlineExceeded
          nil
        end
        answers = Array.new(3) do
          b.call(fallback: ->(error) { error.class }) do
            ran += 1
            Weft::Deadline.current.check!
          end
        end
        assert_equal [Weft::DeadlineExceeded] * 3, answers
      end
    end
    assert_equal 3, ran
    assert_equal :closed, b.state
    assert_equal [3, 0, 3], b.statistics.values_at(:calls, :failures, :starved)
  end

  # Cancelled before any deadline passed (here by a sibling's failure), a call is not late.
  def test_a_call_cancelled_before_its_deadline_still_does_not_count
    b = breaker(minimum_calls: 100, window_calls: 100)
    Weft.run do
      assert_raises(Boom) do
        Weft.scatter([1, 2], deadline: 5) do |item|
          item == 1 ? (sleep 0.01; raise Boom) : b.call { sleep 1 }
        end
      end
    end
    assert_equal [1, 0, 1], b.statistics.values_at(:calls, :failures, :ignored)
  end

  def test_time_window_forgets_old_outcomes
    b = breaker(window_calls: nil, window_seconds: 0.3, minimum_calls: 4)
    fail_calls(b, 3)
    sleep 0.4
    fail_calls(b, 1)
    succeed_calls(b, 3) # 1 failure of 4 in the window; 4 of 7 had the old ones stayed
    assert_equal :closed, b.state
    fail_calls(b, 3)
    assert_equal :open, b.state
  end

  # A burst of failures into an empty time window (a cold start after an idle spell) opens a
  # breaker at once, however short the burst; with failing_for it opens only once the failures
  # have gone on that long.
  def test_failing_for_lets_a_short_burst_pass_and_opens_on_lasting_failure
    plain = breaker(window_calls: nil, window_seconds: 1, minimum_calls: 4)
    fail_calls(plain, 4)
    assert_equal :open, plain.state

    b = breaker(window_calls: nil, window_seconds: 1, minimum_calls: 4, failing_for: 0.3)
    fail_calls(b, 4)
    succeed_calls(b, 1)
    assert_equal :closed, b.state, "a burst shorter than failing_for"
    sleep 0.35
    fail_calls(b, 1) # 5 of 6 failed, the first 0.35 s ago
    assert_equal :open, b.state
  end

  def test_failing_for_counts_from_the_oldest_failure_still_in_the_window
    b = breaker(window_calls: nil, window_seconds: 0.5, minimum_calls: 4, failing_for: 0.3)
    fail_calls(b, 4)
    sleep 0.6 # the burst ages out of the window
    fail_calls(b, 4)
    assert_equal :closed, b.state, "the old burst no longer counts towards failing_for"
    sleep 0.35
    fail_calls(b, 1)
    assert_equal :open, b.state
  end

  def test_calls_admitted_before_it_opened_do_not_judge_the_ramp
    b = breaker(open_for: 0.05, ramp: [1.0], ramp_for: 10, ramp_minimum_calls: 1)
    Weft.run do
      slow = Weft.spawn { b.call(fallback: ->(_) {}) { sleep 0.2; raise Boom } } # admitted while closed
      sleep 0.01
      fail_calls(b, 10)
      sleep 0.06
      succeed_calls(b, 1)
      assert_equal :ramping, b.state
      slow.wait
      assert_equal :ramping, b.state # its failure belongs to the closed period
    end
    assert_equal 11, b.statistics[:failures]
  end

  def test_rate_limit_and_bulkhead_refusals_go_to_the_fallback_uncounted
    limited = breaker(rate_limit: Weft::RateLimiter.new(rate: 1, burst: 2), minimum_calls: 1, window_calls: 1)
    errors = Array.new(3) { limited.call(fallback: ->(e) { e }) { :ran } }
    assert_equal :ran, errors[0]
    assert_equal :ran, errors[1]
    assert_instance_of Weft::RateLimited, errors[2]
    assert_equal :closed, limited.state
    assert_equal [3, 2, 0, 1], limited.statistics.values_at(:calls, :successes, :failures, :rejected)

    bulkhead = Weft::Bulkhead.new(limit: 1)
    guarded = breaker(bulkhead: bulkhead, minimum_calls: 1, window_calls: 1)
    inner = nil
    outer = guarded.call do
      inner = guarded.call(fallback: ->(e) { e }) { :ran }
      :outer
    end
    assert_equal :outer, outer
    assert_instance_of Weft::BulkheadFull, inner
    assert_equal 0, bulkhead.active
    assert_raises(Boom) { guarded.call { raise Boom } }
    assert_equal 0, bulkhead.active # released on failure too
  end

  # `deadline:` (a deadline of the call's own, not a Weft.deadline: an HTTP request's) bounds the
  # guards' waits as Weft.remaining does, in a plain thread here (no reactor, no timer), and
  # nothing else: a call that runs is judged as without it.
  def test_a_deadline_given_to_call_bounds_the_guards_waits
    limiter = Weft::RateLimiter.new(rate: 2, burst: 1, timeout: nil) # the next token is 0.5 s away
    limited = breaker(rate_limit: limiter)
    assert_equal :ran, limited.call(deadline: Weft::Deadline.after(1)) { :ran }
    refusal, seconds = timed { limited.call(deadline: Weft::Deadline.after(0.2)) { :ran } }
    assert_instance_of Weft::RateLimited, refusal
    assert_operator seconds, :<, 0.1, "slept towards a token due after the deadline"
    assert_equal :ran, limited.call(deadline: Weft::Deadline.after(1)) { :ran }, "a token within the deadline is waited for"

    bulkhead = Weft::Bulkhead.new(limit: 1, queue: 1) # waits as long as it takes by itself
    guarded = breaker(bulkhead: bulkhead)
    holding = Queue.new
    done = Queue.new
    holder = Thread.new { guarded.call { holding << true; done.pop } }
    holding.pop
    refusal, seconds = timed { guarded.call(deadline: Weft::Deadline.after(0.1)) { :ran } }
    done << true
    holder.join
    assert_instance_of Weft::BulkheadFull, refusal
    assert_operator seconds, :>=, 0.09
    assert_operator seconds, :<, 0.1 + 1.0, "waited for a slot past the deadline"
    assert_equal [2, 1, 0, 1], guarded.statistics.values_at(:calls, :successes, :failures, :rejected)
    assert_equal 0, bulkhead.active
  end

  def test_shared_between_threads_the_counters_add_up
    b = breaker(window_calls: 50, minimum_calls: 50, failure_rate: 0.3, open_for: 0.01, ramp_for: 0.02,
                ramp: [0.5], ramp_minimum_calls: 5)
    ran = 0
    ran_lock = Mutex.new
    threads = Array.new(6) do |t|
      Thread.new do
        2_000.times do |i|
          b.call(fallback: ->(_) {}) do
            ran_lock.synchronize { ran += 1 }
            raise Boom if (i + t) % 4 == 0 # a failure rate near the threshold: the state moves
          end
        end
      end
    end
    threads.each(&:join)
    stats = b.statistics
    assert_equal 12_000, stats[:calls]
    assert_equal stats[:calls], stats[:successes] + stats[:failures] + stats[:rejected] + stats[:ignored]
    assert_equal ran, stats[:successes] + stats[:failures]
  end

  def test_registry
    named = Weft::CircuitBreaker.new("registry-#{name}")
    assert_same named, Weft::CircuitBreaker["registry-#{name}"]
    assert_same named, Weft::CircuitBreaker[:"registry-#{name}"]
    assert_includes Weft::CircuitBreaker.all, named
    assert_includes Weft::CircuitBreaker.statistics.map { |s| s[:name] }, "registry-#{name}"
    replacement = Weft::CircuitBreaker.new("registry-#{name}")
    assert_same replacement, Weft::CircuitBreaker["registry-#{name}"]
    Weft::CircuitBreaker.new("unregistered-#{name}", register: false)
    assert_nil Weft::CircuitBreaker["unregistered-#{name}"]
  end

  def test_for_keeps_one_breaker_per_name_until_it_is_unregistered
    made = Weft::CircuitBreaker.for("for-#{name}", open_for: 1)
    assert_same made, Weft::CircuitBreaker.for("for-#{name}", open_for: 2)
    assert_same made, Weft::CircuitBreaker["for-#{name}"]
    assert_same made, Weft::CircuitBreaker.unregister("for-#{name}")
    assert_nil Weft::CircuitBreaker["for-#{name}"]
    refute_includes Weft::CircuitBreaker.all, made
    refute_same made, Weft::CircuitBreaker.for("for-#{name}")
    assert_nil Weft::CircuitBreaker.unregister("never-#{name}")
  ensure
    Weft::CircuitBreaker.unregister("for-#{name}")
  end

  def test_failed_if_counts_a_value_as_a_failure_and_still_returns_it
    b = breaker(minimum_calls: 2, window_calls: 2)
    answers = Array.new(2) { b.call(failed_if: ->(status) { status >= 500 }) { 503 } }
    assert_equal [503, 503], answers
    assert_equal :open, b.state
    assert_equal [2, 2, 0], b.statistics.values_at(:calls, :failures, :successes)
  end

  def test_for_finds_or_makes_one_registered_breaker_per_name
    made = Weft::CircuitBreaker.for("for-#{name}", open_for: 7)
    assert_same made, Weft::CircuitBreaker.for("for-#{name}", open_for: 1), "options apply only when it is made"
    assert_same made, Weft::CircuitBreaker["for-#{name}"]
    threads = Array.new(8) { Thread.new { Weft::CircuitBreaker.for("race-#{name}") } }
    assert_equal 1, threads.map(&:value).uniq.size
    assert_raises(ArgumentError) { Weft::CircuitBreaker.for("bad-#{name}", failure_rate: 3) }
    assert_nil Weft::CircuitBreaker["bad-#{name}"]
  end

  def test_invalid_options_raise_argument_error
    [
      { window_calls: 0 }, { window_seconds: -1 }, { window_calls: 10, window_seconds: 5 },
      { minimum_calls: 0 }, { window_calls: 5, minimum_calls: 6 },
      { failure_rate: 0 }, { failure_rate: 1.5 }, { slow_rate: -0.1 }, { slow_call: -1 }, { slow_call: 0 },
      { open_for: -1 }, { open_for: Float::INFINITY }, { ramp_for: 0 },
      { ramp: [] }, { ramp: [0.5, 0.25] }, { ramp: [0.5, 0.5] }, { ramp: [0, 0.5] }, { ramp: [0.5, 1.5] }, { ramp: 0.5 },
      { ramp_minimum_calls: 0 }, { failure: [] }, { failure: ["IOError"] }, { failure: [Object] },
      { rate_limit: 10 }, { bulkhead: 4 }, { ramp_deadline: 0 }, { ramp_deadline: -1 },
      { failing_for: 1 }, { window_calls: nil, window_seconds: 2, failing_for: 3 },
      { window_calls: nil, window_seconds: 2, failing_for: 0 }
    ].each do |options|
      assert_raises(ArgumentError, options.inspect) { Weft::CircuitBreaker.new("bad", register: false, **options) }
    end
    assert_raises(ArgumentError) { Weft::CircuitBreaker.new("", register: false) }
    assert_raises(ArgumentError) { breaker.on_change }
  end
end
