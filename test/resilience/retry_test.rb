# frozen_string_literal: true

require_relative "../test_helper"
require_relative "../http/support"
require "weft/http"
require "weft/resilience"

class RetryTest < Minitest::Test
  include Weft::Test::HTTPFixtures

  def now
    Weft::Timers.now
  end


  def unlimited
    Weft::RetryBudget.new(ratio: 1, min_per_second: 1000)
  end

  def test_transient_failures_are_retried_until_the_call_succeeds_over_real_sockets
    requests = 0
    lock = Mutex.new
    flaky = server(raw: true) do |socket, _id|
      # The first two connections are dropped without an answer; the third is served.
      if lock.synchronize { (requests += 1) <= 2 }
        socket.close
      else
        socket.readpartial(4096)
        socket.write("HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok")
      end
    end
    http = client(flaky.url)
    attempts = []
    body = Weft.run do
      Weft::Retry.new(attempts: 3, base: 0.01, budget: unlimited).call do |attempt|
        attempts << attempt
        http.get("/").body
      end
    end
    assert_equal "ok", body
    assert_equal [1, 2, 3], attempts
  end

  def test_errors_that_are_not_retryable_are_raised_at_once
    attempts = 0
    policy = Weft::Retry.new(attempts: 5, base: 0, budget: unlimited)
    error = assert_raises(ArgumentError) { policy.call { attempts += 1; raise ArgumentError, "bad request" } }
    assert_equal "bad request", error.message
    assert_equal 1, attempts
  end

  def test_the_last_error_is_raised_when_attempts_run_out
    attempts = []
    error = assert_raises(Errno::ECONNREFUSED) do
      Weft::Retry.new(attempts: 3, base: 0, budget: unlimited).call do |attempt|
        attempts << attempt
        raise Errno::ECONNREFUSED, "attempt #{attempt}"
      end
    end
    assert_match(/attempt 3/, error.message)
    assert_equal [1, 2, 3], attempts
  end

  def test_cancellation_is_never_retried
    attempts = 0
    policy = Weft::Retry.new(attempts: 5, base: 0, on: [Exception], budget: unlimited)
    task = nil
    Weft.run do
      task = Weft.spawn { policy.call { attempts += 1; sleep 5 } }
      sleep 0.02
      task.cancel
    end
    assert_predicate task, :cancelled?
    assert_equal 1, attempts
  end

  def test_the_backoff_never_sleeps_past_the_deadline
    # Backoffs of up to 1 s under a 0.2 s deadline: the policy gives up with the block's own
    # error as soon as the next backoff would end past the deadline, instead of sleeping into it.
    policy = Weft::Retry.new(attempts: 1000, base: 0.5, cap: 1, budget: unlimited)
    failing = ->(_attempt) { raise Weft::TimeoutError, "upstream timed out" }
    10.times do
      error, took = Weft.run { timed { Weft.deadline(0.2) { policy.call(&failing) } } }
      assert_instance_of Weft::TimeoutError, error, "the block's error, not a DeadlineExceeded from the backoff"
      assert_equal "upstream timed out", error.message
      assert_operator took, :<, 0.2 + 0.3
    end
    # Outside a reactor, in a plain thread, too.
    error, took = timed { Weft.deadline(0.2) { policy.call(&failing) } }
    assert_instance_of Weft::TimeoutError, error
    assert_operator took, :<, 0.2 + 0.3
  end

  def test_a_deadline_that_strikes_during_a_backoff_raises_the_last_error
    # The backoff (at most 40 ms) fits in the 100 ms deadline, but another task hogs the reactor
    # for 200 ms meanwhile, so the sleep and the deadline end in the same turn.
    policy = Weft::Retry.new(attempts: 2, base: 0.04, budget: unlimited)
    error = Weft.run do
      Weft.deadline(0.1) do
        policy.call do |attempt|
          Weft.spawn(detached: true) { busy_until = now + 0.2; nil while now < busy_until }
          raise Errno::ECONNRESET, "attempt #{attempt}"
        end
      end
    rescue Exception => e # rubocop:disable Lint/RescueException
      e
    end
    assert_instance_of Errno::ECONNRESET, error
    assert_match(/attempt 1/, error.message)
  end

  def test_an_expired_deadline_is_not_retried
    attempts = 0
    error, took = Weft.run do
      timed do
        Weft.deadline(0.05) { Weft::Retry.new(attempts: 10, base: 0, budget: unlimited).call { attempts += 1; sleep 5 } }
      end
    end
    assert_kind_of Weft::DeadlineExceeded, error
    assert_equal 1, attempts
    assert_operator took, :<, 0.05 + 0.3
  end

  def test_backoff_is_full_jitter_between_zero_and_the_capped_exponential_ceiling
    policy = Weft::Retry.new(base: 0.1, cap: 0.5)
    { 1 => 0.1, 2 => 0.2, 3 => 0.4, 4 => 0.5, 10 => 0.5 }.each do |retry_number, ceiling|
      delays = Array.new(200) { policy.backoff(retry_number) }
      assert delays.all? { |delay| delay >= 0 && delay <= ceiling }, "retry #{retry_number}: #{delays.minmax}"
      assert_operator delays.min, :<, ceiling * 0.1, "spread down to zero"
      assert_operator delays.max, :>, ceiling * 0.9, "spread up to the ceiling"
    end
  end

  def test_the_budget_stops_retries_at_its_share_of_calls
    budget = Weft::RetryBudget.new(ratio: 0.2, min_per_second: 0)
    policy = Weft::Retry.new(attempts: 3, base: 0, budget: budget)
    attempts = 0
    1000.times do
      policy.call { attempts += 1; raise EOFError }
    rescue EOFError
      nil
    end
    retries = attempts - 1000
    assert_operator retries, :<=, 200
    assert_operator retries, :>=, 190
    assert_equal 1000, budget.calls
    assert_equal retries, budget.retries
  end

  def test_the_budget_is_shared_by_threads_and_tasks
    budget = Weft::RetryBudget.new(ratio: 0.2, min_per_second: 0)
    policy = Weft::Retry.new(attempts: 3, base: 0, budget: budget)
    attempts = Queue.new
    calls = lambda do |count|
      count.times do
        policy.call { attempts << 1; sleep 0; raise EOFError }
      rescue EOFError
        nil
      end
    end
    threads = Array.new(2) { Thread.new { calls.call(250) } }
    threads += Array.new(2) { Thread.new { Weft.run { Array.new(5) { Weft.spawn { calls.call(50) } }.each(&:wait) } } }
    threads.each(&:join)
    retries = attempts.size - 1000
    assert_operator retries, :<=, 200
    assert_operator retries, :>=, 190
  end

  def test_which_errors_retry_is_configurable
    counting = lambda do |policy, error|
      attempts = 0
      begin
        policy.call { attempts += 1; raise error }
      rescue StandardError
        nil
      end
      attempts
    end
    by_class = Weft::Retry.new(attempts: 2, base: 0, on: [KeyError], budget: unlimited)
    assert_equal 2, counting.call(by_class, KeyError.new)
    assert_equal 1, counting.call(by_class, Weft::TimeoutError.new)
    by_test = Weft::Retry.new(attempts: 2, base: 0, on: ->(error) { error.message == "again" }, budget: unlimited)
    assert_equal 2, counting.call(by_test, RuntimeError.new("again"))
    assert_equal 1, counting.call(by_test, RuntimeError.new("stop"))
  end

  def test_by_default_timeouts_and_connection_failures_retry
    policy = Weft::Retry.new
    [Weft::TimeoutError.new, Weft::DeadlineExceeded.new, Weft::HTTP::ReadTimeout.new, Errno::ECONNREFUSED.new,
     Errno::ECONNRESET.new, Errno::EPIPE.new, EOFError.new, Weft::HTTP::ConnectionRefused.new,
     Weft::HTTP::ConnectionReset.new].each do |error|
      assert policy.retries?(error), error.inspect
    end
    [RuntimeError.new, ArgumentError.new, IOError.new, Weft::HTTP::TLSVerificationError.new,
     Weft::HTTP::MalformedResponse.new, Weft::Cancelled.new, Interrupt.new].each do |error|
      refute policy.retries?(error), error.inspect
    end
  end

  def test_weft_retry_draws_on_the_shared_default_budget_unless_given_one
    assert_instance_of Weft::RetryBudget, Weft::RetryBudget.default
    budget = Weft::RetryBudget.new(ratio: 0, min_per_second: 0)
    attempts = 0
    assert_raises(EOFError) { Weft.retry(attempts: 3, base: 0, budget: budget) { attempts += 1; raise EOFError } }
    assert_equal 1, attempts, "an empty budget allows no retry"
    assert_equal 3, Weft.retry(attempts: 3, base: 0) { |attempt| attempt < 3 ? raise(EOFError) : attempt }
  end

  def test_bad_options_raise_argument_error
    [
      { attempts: 0 }, { attempts: 1.5 }, { base: -0.1 }, { base: Float::NAN }, { cap: -1 },
      { base: 1, cap: 0.5 }, { on: [] }, { on: ["EOFError"] }, { budget: 5 }
    ].each do |options|
      assert_raises(ArgumentError, options.inspect) { Weft::Retry.new(**options) }
    end
    assert_raises(ArgumentError) { Weft::Retry.new.call }
  end
end
