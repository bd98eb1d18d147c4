# frozen_string_literal: true

require_relative "../test_helper"
require_relative "../http/support"
require "weft/http"
require "weft/resilience"

class ScatterTest < Minitest::Test
  include Weft::Test::HTTPFixtures

  def now
    Weft::Timers.now
  end


  # --- the ring-pool case: real shards over real sockets -----------------------------------------

  def test_forty_items_over_four_shards_one_silent_get_thirty_values_and_ten_fallbacks_by_the_deadline
    shards = Array.new(3) { |n| server { |request| [200, {}, "shard#{n}:#{request.path}"] } }
    silent = server(raw: true) { |socket, _id| socket.read } # accepts, reads, never answers
    shards << silent
    clients = shards.map { |shard| client(shard.url, connect_timeout: 5, read_timeout: 30) }
    deadline = 1.0
    cleaned = []
    results, took, unwound = Weft.run do
      # Open the keep-alive connections to the answering shards first (ten each, one per item in
      # flight), so that a loaded machine spends the deadline on requests, not on handshakes.
      Weft.scatter((0...40).reject { |item| item % 4 == 3 }) { |item| clients[item % 4].get("/warm-up").body }
      outcome = timed do
        Weft.scatter(0...40, deadline: deadline, fallback: ->(item, error) { [:overflow, item, error.class] }) do |item|
          clients[item % 4].get("/allocate/#{item}").body
        ensure
          cleaned << item
        end
      end
      [*outcome, cleaned.dup]
    end
    values = results.reject { |result| result.is_a?(Array) }
    fallbacks = results.select { |result| result.is_a?(Array) }
    assert_equal 30, values.size, results.inspect
    assert_equal (0...40).reject { |item| item % 4 == 3 }.map { |item| "shard#{item % 4}:/allocate/#{item}" }, values
    assert_equal (3...40).step(4).map { |item| [:overflow, item] }, fallbacks.map { |fallback| fallback.first(2) }
    # The silent shard's requests end at the deadline (as the client's Weft::HTTP::DeadlineExceeded,
    # which says what the request was doing, when its own wait noticed first).
    fallbacks.each { |(_, item, error)| assert_operator error, :<=, Weft::DeadlineExceeded, "item #{item}: #{error}" }
    assert_operator took, :>=, deadline - 0.01
    assert_operator took, :<, deadline + 0.2, "returned #{took - deadline}s after the deadline"
    # Every item's ensure ran before Weft.scatter returned, the ten late ones' included.
    assert_equal (0...40).to_a, unwound.sort
    assert_equal 10, silent.connections
  end

  # --- results and failures ------------------------------------------------------------------

  def test_results_come_in_item_order_not_finish_order
    results = Weft.run { Weft.scatter([0.05, 0.01, 0.03, 0]) { |delay| sleep delay; delay * 100 } }
    assert_equal [5.0, 1.0, 3.0, 0], results
  end

  def test_without_a_fallback_the_first_failure_is_raised_with_its_backtrace_and_the_gather_point
    raise_line = nil
    call_line = nil
    cleaned = []
    unwound = nil
    error = took = nil
    log = capture_log do
      error, took = timed do
        Weft.run do
          call_line = __LINE__ + 1
          Weft.scatter([5, 0.02, 5, 0.02]) do |delay|
            sleep delay
            raise_line = __LINE__ + 1
            raise IOError, "shard down after #{delay}"
          ensure
            cleaned << delay
          end
        ensure
          unwound = cleaned.dup
        end
      end
    end
    assert_empty log, "a failure that lost the race to be raised counts as observed"
    assert_instance_of IOError, error
    assert_equal "shard down after 0.02", error.message
    assert_operator took, :<, 1, "the first failure is raised at once, not after the others"
    assert_equal [0.02, 0.02, 5, 5], unwound.sort, "the other items were cancelled and unwound before the raise"
    # Where it happened, then where it was gathered.
    assert_match(/\A#{Regexp.escape(__FILE__)}:#{raise_line}:/, error.backtrace.first)
    gathered = error.backtrace.index { |line| line.start_with?("#{__FILE__}:#{call_line}:") }
    refute_nil gathered, error.backtrace.join("\n")
    assert_operator gathered, :>, 0
  end

  def test_without_a_fallback_a_late_item_raises_deadline_exceeded_at_the_deadline
    cleaned = []
    unwound = nil
    error = took = nil
    log = capture_log do
      error, took = timed do
        Weft.run do
          Weft.scatter([0.01, 5], deadline: 0.1) do |delay|
            sleep delay
          ensure
            cleaned << delay
          end
        ensure
          unwound = cleaned.dup
        end
      end
    end
    assert_empty log, "the late item's own expiry counts as observed"
    assert_kind_of Weft::DeadlineExceeded, error
    assert_operator took, :<, 0.1 + 0.3
    assert_equal [0.01, 5], unwound.sort
  end

  def test_a_fallback_stands_in_for_failures_and_late_items_and_sees_the_partial_results
    seen = []
    fallback = lambda do |item, error, partial|
      seen << [item, error.class, partial.items, partial.values, partial.size, partial.total]
      -item
    end
    results = Weft.run do
      Weft.scatter(1..5, deadline: 0.2, fallback: fallback) do |item|
        raise KeyError, "no #{item}" if item == 2
        sleep 5 if item == 4
        item * 10
      end
    end
    assert_equal [10, -2, 30, -4, 50], results
    assert_equal [[2, KeyError, [1, 3, 5], [10, 30, 50], 3, 5], [4, Weft::DeadlineExceeded, [1, 3, 5], [10, 30, 50], 3, 5]], seen
  end

  def test_a_two_argument_fallback_gets_the_item_and_its_error
    results = Weft.run do
      Weft.scatter(%w[a b], fallback: ->(item, error) { "#{item}:#{error.message}" }) { |item| raise item.upcase }
    end
    assert_equal %w[a:A b:B], results
  end

  def test_a_fallback_that_raises_propagates_its_own_error
    cleaned = []
    unwound = nil
    error, took = timed do
      Weft.run do
        Weft.scatter([0, 1, 2], deadline: 0.1, fallback: ->(item, _error) { raise ArgumentError, "no overflow for #{item}" }) do |item|
          raise IOError if item == 1
          sleep 5 if item == 2
          item
        ensure
          cleaned << item
        end
      ensure
        unwound = cleaned.dup
      end
    end
    assert_instance_of ArgumentError, error
    assert_equal "no overflow for 1", error.message
    assert_operator took, :<, 0.1 + 0.3
    assert_equal [0, 1, 2], unwound.sort, "the late item was cancelled and unwound"
  end

  def test_an_error_that_is_not_a_standard_error_is_raised_even_with_a_fallback
    error, took = timed do
      Weft.run do
        Weft.scatter([0, 1], fallback: ->(_item, _error) { :fallback }) do |item|
          item.zero? ? sleep(5) : raise(NotImplementedError, "bug")
        end
      end
    end
    assert_instance_of NotImplementedError, error
    assert_operator took, :<, 1
  end

  # A NameError (NoMethodError included) is a bug in the item's code, not an outage of what it
  # calls: a fallback standing in for it would hide it behind degraded answers.
  def test_a_name_error_is_a_bug_raised_even_with_a_fallback
    error, took = timed do
      Weft.run do
        Weft.scatter([0, 1], fallback: ->(_item, _error) { :fallback }) do |item|
          item.zero? ? sleep(5) : nil.upcase
        end
      end
    end
    assert_instance_of NoMethodError, error
    assert_operator took, :<, 1
  end

  def test_failures_collected_for_fallbacks_are_not_logged_and_never_reach_the_reactor
    ticks = 0
    log = capture_log do
      results = Weft.run do
        ticker = Weft.spawn { 10.times { ticks += 1; sleep 0.005 } }
        results = Weft.scatter(0...6, fallback: ->(_item, error) { error.class }) do |item|
          sleep 0.01
          raise IOError if item.odd?
          item
        end
        ticker.wait
        results
      end
      assert_equal [0, IOError, 2, IOError, 4, IOError], results
    end
    assert_equal 10, ticks
    assert_empty log
  end

  # --- concurrency -----------------------------------------------------------------------------

  def test_concurrency_limits_the_items_running_at_once
    in_flight = 0
    peak = 0
    results, took = Weft.run do
      timed do
        Weft.scatter(0...12, concurrency: 3) do |item|
          in_flight += 1
          peak = [peak, in_flight].max
          sleep 0.05
          item
        ensure
          in_flight -= 1
        end
      end
    end
    assert_equal (0...12).to_a, results
    assert_equal 3, peak
    assert_operator took, :>=, 0.05 * 4 - 0.01, "four rounds of three"
  end

  def test_items_not_started_by_the_deadline_get_the_fallback_with_deadline_exceeded
    started = []
    results = Weft.run do
      Weft.scatter(0...5, deadline: 0.5, concurrency: 1, fallback: ->(_item, error) { error.class }) do |item|
        started << item
        sleep(item == 2 ? 5 : 0.05)
        item
      end
    end
    assert_equal [0, 1, Weft::DeadlineExceeded, Weft::DeadlineExceeded, Weft::DeadlineExceeded], results
    assert_equal [0, 1, 2], started
  end

  # --- deadlines and cancellation ----------------------------------------------------------------

  def test_the_callers_deadline_caps_the_scatter_deadline_and_reaches_the_items
    remaining = []
    Weft.run do
      results, took = timed do
        Weft.deadline(0.1) do
          Weft.scatter([1, 2], deadline: 5, fallback: ->(_item, error) { error.class }) do
            remaining << Weft.remaining
            sleep 5
          end
        end
      end
      assert_equal [Weft::DeadlineExceeded] * 2, results
      assert_operator took, :<, 0.1 + 0.3
    end
    assert_equal 2, remaining.size
    remaining.each { |left| assert_operator left, :<=, 0.1 }
  end

  def test_a_late_item_that_swallows_its_expiry_is_still_cancelled_at_the_deadline
    cleaned = []
    results, took, unwound = Weft.run do
      outcome = timed do
        Weft.scatter([1], deadline: 0.1, fallback: ->(_item, error) { error.class }) do
          sleep 5
        rescue Weft::DeadlineExceeded
          sleep 5 # a stubborn item: it rescued the deadline and waits on
        ensure
          cleaned << :unwound
        end
      end
      [*outcome, cleaned.dup]
    end
    assert_equal [Weft::DeadlineExceeded], results
    assert_operator took, :<, 0.1 + 0.3
    assert_equal [:unwound], unwound
  end

  def test_a_deadline_that_passed_before_the_call_starts_nothing
    started = false
    results = Weft.run do
      Weft.deadline(0.01) do
        sleep 0.05
      rescue Weft::DeadlineExceeded
        Weft.scatter([1, 2], fallback: ->(_item, error) { error.class }) { started = true }
      end
    end
    assert_equal [Weft::DeadlineExceeded] * 2, results
    refute started
  end

  def test_cancelling_the_caller_cancels_the_items
    cleaned = []
    caller_task = nil
    took = Weft.run do
      _, took = timed do
        caller_task = Weft.spawn do
          Weft.scatter([1, 2, 3], fallback: ->(_item, _error) { :fallback }) do |item|
            sleep 5
          ensure
            cleaned << item
          end
        end
        sleep 0.05
        caller_task.cancel
        caller_task.wait
        sleep 0 # the items unwind on the loop's next turn
      end
      took
    end
    assert_predicate caller_task, :cancelled?
    assert_equal [1, 2, 3], cleaned.sort
    assert_operator took, :<, 1
  end

  def test_any_exception_that_ends_the_callers_wait_cancels_the_items
    cleaned = []
    error, took = timed do
      Weft.run do
        Weft.timeout(0.05) do
          Weft.scatter([1, 2], fallback: ->(_item, _error) { :fallback }) do |item|
            sleep 5
          ensure
            cleaned << item
          end
        end
      end
    end
    assert_instance_of Weft::TimeoutError, error
    assert_operator took, :<, 1, "the items did not run on to their end"
    assert_equal [1, 2], cleaned.sort
  end

  # --- odds and ends ----------------------------------------------------------------------------

  def test_outside_a_reactor_it_runs_one_and_no_items_means_no_work
    assert_equal [2, 4], Weft.scatter([1, 2]) { |item| sleep 0.01; item * 2 }
    assert_equal [], Weft.scatter([]) { raise "never called" }
    assert_equal [], Weft.run { Weft.scatter([]) { raise "never called" } }
  end

  def test_bad_options_raise_argument_error_before_any_item_runs
    called = false
    item = ->(_) { called = true }
    [
      { deadline: -1 }, { deadline: Float::NAN }, { deadline: "1" },
      { concurrency: 0 }, { concurrency: -1 }, { concurrency: 1.5 },
      { fallback: :overflow }, { fallback: ->(_item) {} }, { fallback: ->(_a, _b, _c, _d) {} }
    ].each do |options|
      assert_raises(ArgumentError, options.inspect) { Weft.scatter([1], **options, &item) }
    end
    assert_raises(ArgumentError) { Weft.scatter([1]) }
    refute called
    assert_equal [1], Weft.scatter([1], fallback: ->(i, e, *rest) { [i, e, rest] }) { |i| i }
  end

  # --- leaks ----------------------------------------------------------------------------------

  def test_ten_thousand_scatters_with_failures_leak_no_task_fiber_or_timer
    fallback = ->(_item, error) { error.class }
    batch = lambda do |count|
      count.times do |n|
        case n % 100
        when 0 # one item late: cancelled at a short deadline
          Weft.scatter([0, 1, 2], deadline: 0.002, fallback: fallback) { |k| k == 2 ? sleep(1) : k }
        when 1..30 # no fallback: the failure cancels the rest and is raised
          begin
            Weft.scatter([0, 1, 2]) { |k| k == 1 ? raise(IOError) : sleep(0) }
          rescue IOError
            nil
          end
        else # failures stood in for, a concurrency limit, a deadline that does not pass
          Weft.scatter([0, 1, 2, 3], deadline: 5, concurrency: 2, fallback: fallback) { |k| k.odd? ? raise(KeyError) : k }
        end
      end
    end
    counts = lambda do
      GC.start
      stats = Weft.scheduler.statistics
      [stats[:tasks], stats[:timers], ObjectSpace.each_object(Fiber).count, Weft::Task.current.children.size]
    end
    log = capture_log do
      Weft.run do
        batch.call(1_000)
        tasks, timers, fibers, children = counts.call
        batch.call(10_000)
        tasks_after, timers_after, fibers_after, children_after = counts.call
        assert_equal tasks, tasks_after
        assert_equal 1, tasks_after, "only the root task is left"
        assert_equal timers, timers_after
        assert_equal 0, timers_after
        assert_equal 0, children_after
        assert_equal 0, children
        assert_operator fibers_after, :<=, fibers + 20, "fibers: #{fibers} after 1,000 calls, #{fibers_after} after 10,000 more"
      end
    end
    assert_empty log
  end
end
