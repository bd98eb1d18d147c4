# frozen_string_literal: true

require_relative "test_helper"

class GatherTest < Minitest::Test
  def test_values_in_the_order_given_not_the_order_finished
    values = Weft.run do
      tasks = [0.03, 0.01, 0.02].map { |delay| Weft.spawn { sleep delay; delay } }
      Weft.gather(tasks)
    end
    assert_equal [0.03, 0.01, 0.02], values
  end

  def test_the_first_failure_raises_at_once_and_cancels_the_rest
    slow = nil
    error = assert_elapsed_under(1) do
      Weft.run do
        slow = Weft.spawn { sleep 10 }
        failing = Weft.spawn { sleep 0.02; raise IOError, "shard down" }
        Weft.gather(slow, failing)
      rescue IOError => e
        e
      end
    end
    assert_equal "shard down", error.message
    assert slow.cancelled?
  end

  def test_the_earliest_failure_wins
    error = Weft.run do
      late = Weft.spawn { sleep 0.05; raise "late" }
      early = Weft.spawn { sleep 0.01; raise "early" }
      Weft.gather(late, early)
    rescue RuntimeError => e
      e
    end
    assert_equal "early", error.message
  end

  def test_a_task_that_failed_before_gather_is_raised
    assert_raises(ArgumentError) do
      Weft.run do
        failed = Weft.spawn { raise ArgumentError }
        Weft.gather(failed, Weft.spawn { sleep 0.01 })
      end
    end
  end

  # A cancelled task's value is nil, as Task#wait has it; gather gave the Weft::Cancelled itself,
  # an exception object among the values, which `a, b = Weft.gather(...)` took for a result.
  def test_a_cancelled_task_gives_nil
    values = Weft.run do
      cancelled = Weft.spawn { sleep 10 }
      done = Weft.spawn { sleep 0.02; :done }
      Weft.spawn { sleep 0.01; cancelled.cancel }
      Weft.gather(cancelled, done)
    end
    assert_equal [nil, :done], values
  end

  def test_collect_returns_every_outcome
    outcomes = Weft.run do
      ok = Weft.spawn { sleep 0.01; :ok }
      bad = Weft.spawn { raise KeyError, "k" }
      cancelled = Weft.spawn { sleep 10 }
      cancelled.cancel
      Weft.gather(ok, bad, cancelled, collect: true)
    end
    assert_equal :ok, outcomes[0]
    assert_kind_of KeyError, outcomes[1]
    assert_kind_of Weft::Cancelled, outcomes[2]
  end

  def test_failures_collected_are_not_logged_as_unobserved
    log = StringIO.new
    original = Weft.logger
    Weft.logger = Logger.new(log)
    Weft.run do
      tasks = Array.new(3) { |i| Weft.spawn { sleep 0.01; raise "n#{i}" } }
      Weft.gather(tasks, collect: true)
    end
    assert_empty log.string
  ensure
    Weft.logger = original
  end

  def test_empty_and_already_done
    assert_equal [], Weft.run { Weft.gather }
    assert_equal [1], Weft.run { t = Weft.spawn { 1 }; Weft.gather([t]) }
  end

  def test_cancelling_the_gatherer_stops_waiting
    Weft.run do
      child = Weft.spawn { sleep 10 }
      gatherer = Weft.spawn { Weft.gather(child) }
      sleep 0.01
      gatherer.cancel
      gatherer.wait
      assert gatherer.cancelled?
      child.cancel
    end
  end

  def test_gather_outside_a_reactor_is_a_clear_error
    assert_raises(Weft::Error) { Weft.gather }
  end
end
