# frozen_string_literal: true

require_relative "test_helper"

# Fiber storage (Fiber[] / Fiber[]=, Ruby 3.2+) follows tasks, not the pooled fibers they run
# in: a task starts with a copy of its spawner's storage, as Fiber.new gives a new fiber, and
# nothing one task stored is seen by the next task to run in the same fiber.
class FiberStorageTest < Minitest::Test
  def setup
    skip "Fiber storage (Fiber[]) needs Ruby 3.2 or later" unless Fiber.respond_to?(:[])
  end

  def test_a_task_inherits_a_copy_of_its_spawners_storage
    seen = Weft.run do
      Fiber[:request_id] = "r-1"
      child = Weft.spawn do
        inherited = Fiber[:request_id]
        Fiber[:request_id] = "changed by the child"
        Fiber[:child_only] = true
        [inherited, Weft.spawn { Fiber[:request_id] }.wait]
      end.wait
      child + [Fiber[:request_id], Fiber[:child_only]]
    end
    assert_equal ["r-1", "changed by the child", "r-1", nil], seen
  end

  def test_nothing_a_task_stored_leaks_into_the_next_task_on_the_same_fiber
    leaked = Weft.run do
      Weft.spawn { Fiber[:user] = "alice" }.wait
      # The first task's fiber went back to the pool; the next task reuses it.
      Array.new(3) { Weft.spawn { Fiber[:user] }.wait }
    end
    assert_equal [nil, nil, nil], leaked
  end

  def test_fiber_schedule_inherits_too
    value = Weft.run do
      Fiber[:tenant] = "t-9"
      result = nil
      Fiber.schedule { result = Fiber[:tenant] }
      sleep 0.01
      result
    end
    assert_equal "t-9", value
  end
end
