# frozen_string_literal: true

require_relative "../test_helper"
require_relative "../http/support"
require "weft/http"
require "weft/resilience"

class HedgeTest < Minitest::Test
  include Weft::Test::HTTPFixtures

  def now
    Weft::Timers.now
  end


  def test_a_hedge_cuts_a_slow_first_attempt_over_real_sockets
    # Two replicas of one service; the first stalls for a second, as behind a GC pause.
    stalled = server { |request| sleep 1; [200, {}, "late answer to #{request.path}"] }
    healthy = server { |request| [200, {}, "answer to #{request.path}"] }
    replicas = [stalled, healthy].map { |replica| client(replica.url, read_timeout: 5) }
    cleaned = []
    value, took, unwound = Weft.run do
      outcome = timed do
        Weft.hedge(after: 0.05, max: 2) do |attempt|
          "#{attempt}: #{replicas[attempt - 1].get("/quote").body}"
        ensure
          cleaned << attempt
        end
      end
      [*outcome, cleaned.dup]
    end
    assert_equal "2: answer to /quote", value
    assert_operator took, :>=, 0.05
    assert_operator took, :<, 0.5, "the hedge answered, not the stalled first attempt"
    assert_equal [2, 1], unwound, "the first attempt was cancelled and its ensure ran before hedge returned"
    assert_equal 1, healthy.requests.size
  end

  def test_no_more_than_max_attempts_start
    started = []
    value, took = Weft.run do
      timed do
        Weft.hedge(after: 0.02, max: 3) do |attempt|
          started << attempt
          sleep 0.3
          attempt
        end
      end
    end
    assert_equal 1, value, "every attempt is slow: the first one started finishes first"
    assert_equal [1, 2, 3], started
    assert_operator took, :<, 0.3 + 0.2
  end

  def test_max_one_never_hedges
    started = []
    Weft.run { Weft.hedge(after: 0, max: 1) { |attempt| started << attempt; sleep 0.05 } }
    assert_equal [1], started
  end

  def test_a_failed_attempt_starts_the_next_at_once
    value, took = Weft.run do
      timed do
        Weft.hedge(after: 5, max: 3) do |attempt|
          raise IOError, "refused" if attempt == 1
          attempt
        end
      end
    end
    assert_equal 2, value
    assert_operator took, :<, 0.5
  end

  def test_when_every_attempt_fails_the_last_failure_is_raised
    log = StringIO.new
    previous = Weft.logger
    Weft.logger = Logger.new(log)
    error, took = timed do
      Weft.run do
        failed = []
        Weft.hedge(after: 0.01, max: 3) do |attempt|
          sleep 0.005 until failed.size == 3 - attempt # attempt 3 fails first, attempt 1 last
          failed << attempt
          raise IOError, "attempt #{attempt} failed"
        end
      end
    end
    assert_instance_of IOError, error
    assert_equal "attempt 1 failed", error.message
    assert_operator took, :<, 1
    assert_empty log.string, "the earlier failures count as observed"
  ensure
    Weft.logger = previous
  end

  def test_failures_of_losing_attempts_are_not_logged
    log = StringIO.new
    previous = Weft.logger
    Weft.logger = Logger.new(log)
    # All three attempts start at once and end in the same turn: the first wins, and the other
    # two fail after the winner has been taken.
    value = Weft.run { Weft.hedge(after: 0, max: 3) { |attempt| attempt == 1 ? :won : raise(IOError, "lost #{attempt}") } }
    assert_equal :won, value
    assert_empty log.string
  ensure
    Weft.logger = previous
  end

  def test_an_error_that_is_not_a_standard_error_is_raised_at_once_and_cancels_the_rest
    cleaned = []
    error, took = Weft.run do
      timed do
        Weft.hedge(after: 0.01, max: 2) do |attempt|
          sleep 5 if attempt == 1
          raise NotImplementedError, "bug"
        ensure
          cleaned << attempt
        end
      end
    end
    assert_instance_of NotImplementedError, error
    assert_operator took, :<, 1
    assert_equal [1, 2], cleaned.sort
  end

  # A NameError (NoMethodError included) is a bug: another attempt would only repeat it.
  def test_a_name_error_is_raised_at_once_without_another_attempt
    attempts = []
    assert_raises(NoMethodError) do
      Weft.run do
        Weft.hedge(after: 1, max: 3) do |attempt|
          attempts << attempt
          nil.upcase
        end
      end
    end
    assert_equal [1], attempts
  end

  def test_a_percentile_policy_learns_the_latencies_and_hedges_after_them
    hedge = Weft::Hedge.new(after: :p95, max: 2, warmup: 10, window: 50)
    started = []
    Weft.run do
      # Warming up: no hedge yet, however slow.
      assert_nil hedge.delay
      hedge.call { |attempt| started << attempt; sleep 0.3 }
      assert_equal [1], started
      9.times { hedge.call { sleep 0.01 } }
      assert_operator hedge.delay, :>=, 0.3, "p95 (nearest rank) of 9 × 10 ms and 1 × 300 ms is the 300 ms"
      39.times { hedge.call { sleep 0.01 } }
      assert_operator hedge.delay, :<, 0.3, "p95 of 48 × 10 ms and 1 × 300 ms leaves the outlier out"
      started.clear
      value, took = timed { hedge.call { |attempt| started << attempt; sleep(attempt == 1 ? 1 : 0.01); attempt } }
      assert_equal 2, value
      assert_equal [1, 2], started
      assert_operator took, :<, 0.5
    end
  end

  def test_a_budget_bounds_the_extra_attempts
    budget = Weft::RetryBudget.new(ratio: 0, min_per_second: 1, window: 1) # one extra attempt a second
    hedge = Weft::Hedge.new(after: 0.01, max: 2, budget: budget)
    started = []
    Weft.run do
      3.times { hedge.call { |attempt| started << attempt; sleep 0.05 } }
    end
    assert_equal [1, 2, 1, 1], started
  end

  def test_the_callers_deadline_bounds_the_attempts_and_cancelling_the_caller_cancels_them
    cleaned = []
    Weft.run do
      error, took = timed do
        Weft.deadline(0.1) do
          Weft.hedge(after: 0.02, max: 2) do |attempt|
            sleep 5
          ensure
            cleaned << attempt
          end
        end
      end
      assert_kind_of Weft::DeadlineExceeded, error
      assert_operator took, :<, 0.1 + 0.3

      caller_task = Weft.spawn do
        Weft.hedge(after: 0.01, max: 2) do |attempt|
          sleep 5
        ensure
          cleaned << attempt + 10
        end
      end
      sleep 0.05
      caller_task.cancel
      caller_task.wait
      sleep 0
      assert_predicate caller_task, :cancelled?
    end
    assert_equal [1, 2, 11, 12], cleaned.sort
  end

  def test_outside_a_reactor_it_runs_one
    assert_equal 2, Weft.hedge(after: 0.01, max: 2) { |attempt| sleep(attempt == 1 ? 1 : 0); attempt }
  end

  def test_bad_options_raise_argument_error
    [
      { after: -0.1 }, { after: Float::INFINITY }, { after: "0.1" }, { after: :p0 }, { after: :p100 }, { after: :fast },
      { after: 0.1, max: 0 }, { after: 0.1, max: 1.5 }, { after: 0.1, budget: 3 },
      { after: :p95, window: 0 }, { after: :p95, warmup: 0 }
    ].each do |options|
      assert_raises(ArgumentError, options.inspect) { Weft::Hedge.new(**options) }
    end
    assert_raises(ArgumentError) { Weft::Hedge.new(after: 0.1).call }
    assert_raises(ArgumentError) { Weft.hedge(after: :p95) { 1 } } # a percentile needs a kept policy
    assert_nil Weft::Hedge.new(after: :p99_9).delay, "accepted, and warming up"
  end
end
