# frozen_string_literal: true

require_relative "test_helper"

class DeadlineTest < Minitest::Test
  def now
    Weft::Timers.now
  end


  # --- the value type ------------------------------------------------------------------------

  def test_after_rejects_what_cannot_be_a_duration
    [-0.001, -1, Float::NAN, Float::INFINITY, "1", nil, Complex(1, 1)].each do |bad|
      assert_raises(ArgumentError, "Deadline.after(#{bad.inspect})") { Weft::Deadline.after(bad) }
    end
    assert Weft::Deadline.after(0).expired?
  end

  def test_remaining_counts_down_and_never_goes_negative
    deadline = Weft::Deadline.after(0.05)
    first = deadline.remaining
    assert_operator first, :<=, 0.05
    assert_operator first, :>, 0.03
    sleep 0.07
    assert_equal 0.0, deadline.remaining
    assert deadline.expired?
    assert_raises(Weft::DeadlineExceeded) { deadline.check! }
  end

  def test_bound_is_the_shorter_of_a_wait_and_what_is_left
    deadline = Weft::Deadline.after(1)
    assert_equal 0.25, deadline.bound(0.25)
    assert_in_delta 1.0, deadline.bound(5), 0.05
    assert_in_delta 1.0, deadline.bound(nil), 0.05
  end

  def test_earliest_takes_nils_and_compares_by_time
    soon = Weft::Deadline.after(1)
    later = Weft::Deadline.after(2)
    assert_same soon, Weft::Deadline.earliest(soon, later)
    assert_same soon, Weft::Deadline.earliest(later, soon)
    assert_same later, Weft::Deadline.earliest(nil, later)
    assert_nil Weft::Deadline.earliest(nil, nil)
    assert_equal soon, [later, soon].min
    assert_predicate soon, :frozen?
  end

  # --- Weft.deadline inside a reactor ----------------------------------------------------------

  def test_waits_of_every_kind_end_at_the_deadline
    waits = {
      sleep: -> { sleep 5 },
      queue: -> { Thread::Queue.new.pop },
      mutex: lambda {
        mutex = Thread::Mutex.new
        Weft.spawn(detached: true) { mutex.synchronize { sleep 0.5 } }
        sleep 0.01
        mutex.synchronize {}
      },
      socket: lambda {
        left, _right = UNIXSocket.pair
        left.read(1)
      },
      semaphore: lambda {
        semaphore = Weft::Semaphore.new(1)
        semaphore.acquire
        semaphore.acquire
      },
      task_wait: -> { Weft.spawn(detached: true) { sleep 0.5 }.wait },
      # The child outlives the deadline by far (it is killed after), so that a bound loose
      # enough for a fork and exec on a loaded machine still tells a deadline from the child's end:
      # with `sleep 0.5` and 0.3 s, a helper's suite at load 5 took 0.41 s.
      process_wait: lambda {
        pid = Process.spawn("sleep", "5")
        begin
          Process.wait(pid)
        ensure
          Process.kill(:KILL, pid) rescue nil # rubocop:disable Style/RescueModifier
          Process.wait(pid) rescue nil # rubocop:disable Style/RescueModifier
        end
      }
    }
    waits.each do |kind, wait|
      outcome, took = Weft.run { timed { Weft.deadline(0.1) { wait.call } } }
      assert_kind_of Weft::DeadlineExceeded, outcome, "#{kind}: #{outcome.inspect}"
      assert_kind_of Weft::TimeoutError, outcome
      assert_equal "deadline of 0.1s exceeded", outcome.message
      assert_operator took, :<, 0.1 + (kind == :process_wait ? 1.0 : 0.2), "#{kind} took #{took}s"
    end
  end

  def test_a_block_that_finishes_in_time_returns_its_value_and_leaves_no_timer
    Weft.run do
      timers = Weft.scheduler.timers.size
      assert_equal :done, Weft.deadline(1) { sleep 0.01; :done }
      assert_equal timers, Weft.scheduler.timers.size
      assert_nil Weft.remaining
    end
  end

  def test_spawned_tasks_inherit_the_deadline
    outcome, took = timed do
      Weft.run do
        tasks = Weft.deadline(0.2) do
          Array.new(5) { Weft.spawn { sleep 5 } }
        end
        # The spawner left the block at once; its children still end at its deadline.
        tasks.each { |task| assert_raises(Weft::DeadlineExceeded) { task.wait } }
        tasks.map { |task| task.deadline.nil? }
      end
    end
    assert_equal [false] * 5, outcome
    assert_operator took, :>=, 0.19
    assert_operator took, :<, 0.2 + 0.3
  end

  def test_grandchildren_inherit_too_and_gather_fails_by_the_deadline
    outcome, took = timed do
      Weft.run do
        Weft.deadline(0.15) do
          Weft.gather(Array.new(3) { Weft.spawn { Weft.spawn { sleep 5 }.wait } })
        end
      end
    end
    assert_kind_of Weft::DeadlineExceeded, outcome
    assert_operator took, :<, 0.15 + 0.3
  end

  def test_nested_deadlines_take_the_earlier
    Weft.run do
      Weft.deadline(0.5) do
        Weft.deadline(10) { assert_operator Weft.remaining, :<=, 0.5 }
        outcome, took = timed { Weft.deadline(0.05) { sleep 5 } }
        assert_kind_of Weft::DeadlineExceeded, outcome
        assert_equal "deadline of 0.05s exceeded", outcome.message
        assert_operator took, :<, 0.05 + 0.2
        # The outer deadline is in force again, and still ends its block.
        assert_operator Weft.remaining, :>, 0.2
        assert_operator Weft.remaining, :<=, 0.45
        outcome, = timed { sleep 5 }
        assert_equal "deadline of 0.5s exceeded", outcome.message
      end
    end
  end

  def test_a_wait_begun_after_the_deadline_passed_raises_at_once
    Weft.run do
      outcome, took = timed do
        Weft.deadline(0.05) do
          busy_until = now + 0.1
          nil while now < busy_until # computing: a deadline cannot interrupt a running fiber
          sleep 5
        end
      end
      assert_kind_of Weft::DeadlineExceeded, outcome
      assert_operator took, :<, 0.1 + 0.2
    end
  end

  def test_detached_tasks_do_not_inherit
    Weft.run do
      task = Weft.deadline(0.05) { Weft.spawn(detached: true) { sleep 0.15; Weft.remaining } }
      assert_nil task.wait
      assert_nil task.deadline
    end
  end

  def test_fiber_schedule_inherits_like_spawn
    Weft.run do
      outcome = nil
      Weft.deadline(0.05) do
        Fiber.schedule do
          sleep 5
        rescue Weft::DeadlineExceeded => e
          outcome = e
        end
      end
      sleep 0.2
      assert_kind_of Weft::DeadlineExceeded, outcome
    end
  end

  def test_the_deadline_does_not_leak_into_the_next_task_on_a_pooled_fiber
    Weft.run do
      Weft.deadline(5) { Weft.spawn { :first }.wait }
      assert_nil Weft.spawn(detached: true) { Weft.remaining }.wait
    end
  end

  def test_a_cancelled_task_is_cancelled_not_failed_when_its_deadline_passes_while_it_unwinds
    Weft.run do
      task = Weft.deadline(0.05) do
        Weft.spawn do
          sleep 5
        ensure
          sleep 0.1 # cleanup that outlasts the deadline
        end
      end
      sleep 0.01
      task.cancel
      assert_nil task.wait
      assert_predicate task, :cancelled?
    end
  end

  def test_a_rescued_expiry_lets_the_task_go_on
    Weft.run do
      value = Weft.deadline(0.05) do
        sleep 5
      rescue Weft::TimeoutError
        :fallback
      end
      assert_equal :fallback, value
      sleep 0.01 # no second raise from a leftover timer
    end
  end

  def test_nil_seconds_runs_under_the_current_deadline_and_bad_seconds_raise
    Weft.run do
      assert_nil(Weft.deadline(nil) { Weft.remaining })
      Weft.deadline(1) { assert_operator(Weft.deadline(nil) { Weft.remaining }, :<=, 1) }
      assert_raises(ArgumentError) { Weft.deadline(-1) {} }
      assert_raises(ArgumentError) { Weft.deadline(1) }
    end
  end

  # --- outside a reactor ---------------------------------------------------------------------

  def test_outside_a_reactor_the_block_is_bounded_and_remaining_is_visible
    assert_nil Weft.remaining
    outcome, took = timed { Weft.deadline(0.1) { [Weft.remaining, sleep(5)] } }
    assert_kind_of Weft::DeadlineExceeded, outcome
    assert_operator took, :<, 0.1 + 0.3
    assert_nil Weft.remaining
  end

  def test_outside_a_reactor_an_expired_deadline_still_interrupts_the_block
    outcome, took = timed { Weft.deadline(0) { sleep 5 } }
    assert_kind_of Weft::DeadlineExceeded, outcome
    assert_operator took, :<, 0.3
  end

  def test_a_reactor_started_under_a_deadline_passes_it_to_its_tasks
    outcome, took = timed do
      Weft.deadline(0.1) { Weft.run { Weft.spawn { sleep 5 }.wait } }
    end
    assert_kind_of Weft::DeadlineExceeded, outcome
    assert_operator took, :<, 0.1 + 0.3
  end
end
