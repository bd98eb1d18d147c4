# frozen_string_literal: true

require_relative "test_helper"
require "active_support"
require "active_support/isolated_execution_state"

# Tasks run in pooled fibers, but nothing a task leaves on its fiber reaches the next task that
# runs in it: fiber-local variables, and state libraries keep on the Fiber object itself.
# (Fiber storage, Fiber[], is covered by fiber_storage_test.rb.)
class FiberReuseTest < Minitest::Test
  # Runs `first` in a task, then `later` in three tasks after it, and returns what they saw,
  # checking that at least one of the later tasks really ran in the first one's fiber.
  def on_a_reused_fiber(first, later)
    Weft.run do
      fiber = Weft.spawn { first.call; Fiber.current }.wait
      runs = Array.new(3) { Weft.spawn { [Fiber.current, later.call] }.wait }
      assert(runs.any? { |(ran_in, _)| ran_in.equal?(fiber) }, "the test needs a pooled fiber to be reused")
      runs.map(&:last)
    end
  end

  def test_fiber_locals_do_not_reach_the_next_task
    seen = on_a_reused_fiber(-> { Thread.current[:user] = "alice" }, -> { Thread.current[:user] })
    assert_equal [nil, nil, nil], seen
  end

  def test_instance_variables_a_library_sets_on_the_fiber_do_not_reach_the_next_task
    seen = on_a_reused_fiber(-> { Fiber.current.instance_variable_set(:@library_state, :first_task) },
                             -> { Fiber.current.instance_variable_get(:@library_state) })
    assert_equal [nil, nil, nil], seen
  end

  def test_active_support_state_with_fiber_isolation_does_not_reach_the_next_task
    level = ActiveSupport::IsolatedExecutionState.isolation_level
    ActiveSupport::IsolatedExecutionState.isolation_level = :fiber
    seen = on_a_reused_fiber(-> { ActiveSupport::IsolatedExecutionState[:current_user] = "alice" },
                             -> { ActiveSupport::IsolatedExecutionState[:current_user] })
    assert_equal [nil, nil, nil], seen
  ensure
    ActiveSupport::IsolatedExecutionState.isolation_level = level
  end

  def test_a_timed_wait_still_works_in_a_reused_fiber
    elapsed = Weft.run do
      Weft.spawn { IO.pipe { |r, _w| r.wait_readable(0.01) } }.wait
      started = Weft::Timers.now
      Weft.spawn { IO.pipe { |r, _w| r.wait_readable(0.05) } }.wait
      Weft::Timers.now - started
    end
    assert_operator elapsed, :>=, 0.04
    assert_operator elapsed, :<, 1
  end
end
