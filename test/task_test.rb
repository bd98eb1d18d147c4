# frozen_string_literal: true

require_relative "test_helper"

class TaskTest < Minitest::Test
  def test_wait_returns_the_value
    assert_equal 3, Weft.run { Weft.spawn(1, 2) { |a, b| sleep 0.01; a + b }.wait }
  end

  def test_spawn_returns_at_once_and_tasks_start_in_spawn_order
    order = []
    Weft.run do
      Weft.spawn { order << :first_started; sleep 0.01; order << :first_done }
      Weft.spawn { order << :second_started }
      order << :spawn_returned
    end
    assert_equal %i[spawn_returned first_started second_started first_done], order
  end

  # A burst of spawns that takes longer than Scheduler::START_SLICE to start is cut short when a
  # timer comes due: the timer fires and the fiber it wakes runs before the burst's last task
  # starts. The burst still starts in spawn order, and what its tasks spawn starts after it.
  def test_a_due_timer_cuts_a_long_burst_of_spawns_short
    burst = 400
    events = []
    Weft.run do
      sleeper = Weft.spawn { 20.times { sleep 0; events << :woke } }
      tasks = Array.new(burst) do |i|
        Weft.spawn do
          events << [:start, i]
          Weft.spawn { events << [:start, :child] } if i.zero?
          busy(0.00002) # 400 x 20 us: 8 ms, several slices
        end
      end
      tasks.each(&:wait)
      sleeper.wait
    end
    starts = events.filter_map { |event| event[1] if event.is_a?(Array) }
    assert_equal (0...burst).to_a + [:child], starts
    assert_operator events.index(:woke), :<, events.index([:start, burst - 1])
  end

  # With no timer due, a burst starts in one turn however long it takes: a fiber woken during it
  # runs after the burst's last task has started (a server's accept burst is not cut up).
  def test_a_burst_of_spawns_with_no_timer_due_starts_in_one_turn
    burst = 400
    events = []
    Weft.run do
      queue = Thread::Queue.new
      waiter = Weft.spawn { queue.pop; events << :woke }
      tasks = Array.new(burst) do |i|
        Weft.spawn do
          events << [:start, i]
          queue << :go if i.zero?
          busy(0.00002)
        end
      end
      tasks.each(&:wait)
      waiter.wait
    end
    assert_equal events.index([:start, burst - 1]) + 1, events.index(:woke)
  end

  def test_a_task_cancelled_before_it_starts_never_runs
    ran = false
    task = nil
    Weft.run do
      task = Weft.spawn { ran = true }
      task.cancel
    end
    refute ran
    assert task.cancelled?
  end

  def test_fiber_schedule_runs_at_once
    order = []
    Weft.run do
      Fiber.schedule { order << :scheduled; sleep 0.01 }
      order << :returned
    end
    assert_equal %i[scheduled returned], order
  end

  def test_wait_reraises_the_task_exception_with_the_task_backtrace
    error = Weft.run do
      task = Weft.spawn { sleep 0.01; raise KeyError, "missing" } # the raise site
      task.wait
    rescue KeyError => e
      e
    end
    assert_equal "missing", error.message
    raise_line = File.readlines(__FILE__).index { |line| line.include?("# the raise site") } + 1
    assert_match(/task_test\.rb:#{raise_line}:/, error.backtrace.first) # where raised, not waited
  end

  def test_a_failure_leaves_other_tasks_undisturbed
    log = StringIO.new
    original = Weft.logger
    Weft.logger = Logger.new(log)
    results = Weft.run do
      failing = Weft.spawn(name: "failing") { sleep 0.01; raise "boom" }
      healthy = Array.new(5) { |i| Weft.spawn { sleep 0.05; i } }
      sleep 0.02
      [failing.failed?, healthy.map(&:wait)]
    end
    assert_equal [true, [0, 1, 2, 3, 4]], results
    assert_equal 1, log.string.scan("task failing failed").size
    assert_match(/task_test\.rb/, log.string) # the backtrace is in the log line
  ensure
    Weft.logger = original
  end

  def test_a_failure_that_is_waited_for_is_not_logged
    log = StringIO.new
    original = Weft.logger
    Weft.logger = Logger.new(log)
    Weft.run do
      task = Weft.spawn { raise "handled" }
      Weft.spawn { sleep 0.01 } # the loop turns (and the first task fails) before the wait
      assert_raises(RuntimeError) { task.wait }
    end
    assert_empty log.string
  ensure
    Weft.logger = original
  end

  def test_cancel_raises_cancelled_at_the_suspension_point_and_runs_ensure
    events = []
    status = Weft.run do
      task = Weft.spawn do
        sleep 10
        events << :not_reached
      rescue StandardError
        events << :rescued_as_standard_error
      ensure
        events << :ensure
      end
      sleep 0.01
      assert task.cancel
      assert_nil task.wait
      task.status
    end
    assert_equal :cancelled, status
    assert_equal [:ensure], events
  end

  def test_cancel_is_prompt
    assert_elapsed_under(1) do
      Weft.run do
        task = Weft.spawn { sleep 30 }
        task.cancel
        task.wait
      end
    end
  end

  def test_cancelling_a_finished_task_does_nothing
    Weft.run do
      task = Weft.spawn { :done }
      sleep 0
      refute task.cancel
      assert_equal :done, task.wait
      assert task.completed?
    end
  end

  def test_cancelling_cancels_descendants_even_after_their_parent_ended
    statuses = Weft.run do
      grandchild = nil
      child = nil
      parent = Weft.spawn do
        child = Weft.spawn do
          grandchild = Weft.spawn { sleep 10 }
          :child_returns_early
        end
        sleep 10
      end
      sleep 0.01
      assert child.completed?
      assert_includes parent.children, grandchild # handed up when the child ended
      parent.cancel
      [parent, grandchild].each(&:wait)
      [parent.status, grandchild.status]
    end
    assert_equal %i[cancelled cancelled], statuses
  end

  def test_a_detached_task_survives_the_cancellation_of_its_spawner
    Weft.run do
      detached = nil
      spawner = Weft.spawn do
        detached = Weft.spawn(detached: true) { sleep 0.05; :finished }
        sleep 10
      end
      sleep 0.01
      spawner.cancel
      spawner.wait
      assert_nil detached.parent
      assert_equal :finished, detached.wait
    end
  end

  def test_self_cancel_raises_at_once
    status = Weft.run do
      task = Weft.spawn do
        Weft::Task.current.cancel
        :not_reached
      end
      task.wait
      task.status
    end
    assert_equal :cancelled, status
  end

  def test_cancel_while_waiting_on_io
    Weft.run do
      reader, writer = IO.pipe
      task = Weft.spawn { reader.read(1) }
      sleep 0.01
      task.cancel
      task.wait
      assert task.cancelled?
      writer.write("x") # the cancelled read must not consume it
      assert_equal "x", Weft.spawn { reader.read(1) }.wait
    ensure
      reader.close
      writer.close
    end
  end

  def test_a_task_cannot_wait_for_itself
    error = Weft.run do
      Weft.spawn { Weft::Task.current.wait }.wait
    rescue Weft::Error => e
      e
    end
    assert_match(/cannot wait for itself/, error.message)
  end

  def test_waiting_from_another_thread_is_a_clear_error
    task = nil
    Weft.run do
      task = Weft.spawn { sleep 0.2 }
      error = Thread.new { task.wait rescue $! }.value
      assert_kind_of Weft::Error, error
      assert_match(/same reactor/, error.message)
    end
  end

  # From another thread, #cancel put the request in the reactor's books without waking it: a
  # task parked on a Queue nobody fills was never cancelled, and Weft.run never returned.
  def test_cancel_from_another_thread_reaches_an_idle_reactor
    task = nil
    canceller = Thread.new do
      sleep 0.01 until task
      sleep 0.05
      task.cancel
    end
    status = assert_elapsed_under(5) do
      Weft.run do
        task = Weft.spawn { Thread::Queue.new.pop }
        task.wait
        task.status
      end
    end
    assert_equal :cancelled, status
    assert canceller.value
  end

  def test_many_waiters_on_one_task
    results = Weft.run do
      task = Weft.spawn { sleep 0.02; :shared }
      Array.new(10) { Weft.spawn { task.wait } }.map(&:wait)
    end
    assert_equal [:shared] * 10, results
  end

  def test_current_and_names
    Weft.run do
      task = Weft.spawn(name: "worker") { Weft::Task.current }
      sleep 0
      assert_same task, task.wait
      assert_equal "worker", task.name
      assert_match(/worker/, task.to_s)
    end
    assert_nil Weft::Task.current
  end

  def test_fiber_schedule_starts_a_task
    ran = []
    Weft.run do
      Fiber.schedule { sleep 0.01; ran << :scheduled }
    end
    assert_equal [:scheduled], ran
  end

  def test_interrupt_in_a_task_unwinds_every_task_and_leaves_run
    cleaned = []
    assert_raises(Interrupt) do
      Weft.run do
        Weft.spawn do
          sleep 10
        ensure
          cleaned << :sleeper
        end
        Weft.spawn { sleep 0.01; raise Interrupt }
        sleep 10
      end
    end
    assert_equal [:sleeper], cleaned
    assert_nil Fiber.scheduler
  end

  private

  # Keeps the CPU for `seconds` without waiting, as a task doing work would.
  def busy(seconds)
    finish = Process.clock_gettime(Process::CLOCK_MONOTONIC) + seconds
    nil while Process.clock_gettime(Process::CLOCK_MONOTONIC) < finish
  end
end
