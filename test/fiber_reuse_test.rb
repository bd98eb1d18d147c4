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

  # Weft::Task.on_end: what a library keeps elsewhere, keyed by the Fiber (ActiveRecord's
  # connection leases), it gives back in a hook that runs as each task ends, in the task's fiber,
  # once its outcome is set and before its waiter resumes.
  def test_end_hooks_run_in_the_ending_tasks_fiber_before_its_waiter_resumes
    seen = []
    hook = Weft::Task.on_end do |task|
      seen << [task.name, task.status, Fiber.current.equal?(task.instance_variable_get(:@fiber)),
               Weft::Task.current.equal?(task), task.cancel]
    end
    log = capture_log do
      Weft.run do
        Weft.spawn(name: "ok") { :value }.wait
        seen << :waiter_resumed
        failing = Weft.spawn(name: "bad") { raise ArgumentError, "boom" }
        assert_raises(ArgumentError) { failing.wait }
        Weft.spawn(name: "slept") { sleep 0.01 }.wait
      end
    end
    assert_equal [["ok", :completed, true, true, false], :waiter_resumed, ["bad", :failed, true, true, false],
                  ["slept", :completed, true, true, false]], seen.first(4) # then Weft.run's own task
    assert_equal "", log
  ensure
    Weft::Task.remove_end_hook(hook)
  end

  # A hook that fails is logged; the task's outcome and the other hooks are not affected.
  def test_a_failing_end_hook_is_logged_and_changes_nothing
    ran = 0
    failing = Weft::Task.on_end { raise "hook broke" }
    counting = Weft::Task.on_end { ran += 1 }
    value = nil
    log = capture_log { value = Weft.run { Weft.spawn { 42 }.wait } }
    assert_equal 42, value
    assert_operator ran, :>=, 1
    assert_match(/task end hook failed .*RuntimeError: hook broke/, log)
    assert Weft::Task.remove_end_hook(failing)
    assert Weft::Task.remove_end_hook(counting)
    refute Weft::Task.remove_end_hook(counting)
    log = capture_log { Weft.run { Weft.spawn { 1 }.wait } }
    assert_equal "", log
  end
end
