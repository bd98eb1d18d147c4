# frozen_string_literal: true

require_relative "test_helper"

# User code switching into fibers the reactor schedules (Fiber#raise, #transfer, #resume, #kill,
# Fiber.yield, Thread#raise): each works or fails at once with a clear error; none may lose a
# fiber and leave Weft.run waiting forever.
class FiberControlTest < Minitest::Test
  # Without the guards these hang; fail in seconds rather than after the default minute.
  def watchdog_timeout
    15
  end

  def test_fiber_raise_into_a_task_waiting_on_a_queue_reaches_it_and_the_raiser_goes_on
    events = []
    Weft.run do
      queue = Thread::Queue.new
      waiter = Fiber.schedule do
        queue.pop
      rescue RuntimeError => e
        events << [:rescued, e.message]
      end
      Fiber.schedule do
        waiter.raise("bye")
        events << :raiser_continued
      end
    end
    # The exception is raised at once, as Ruby documents; the raiser goes on after it.
    assert_equal [[:rescued, "bye"], :raiser_continued], events
  end

  def test_fiber_raise_reaches_tasks_parked_on_a_timer_and_on_a_socket
    reader, writer = UNIXSocket.pair
    outcomes = Weft.run do
      sleeper = Weft.spawn { sleep 10 }
      socket_reader = Weft.spawn { reader.read(1) }
      sleep 0.01 # both are parked now
      [sleeper, socket_reader].each { |task| task.fiber.raise(ArgumentError, "stop") }
      [sleeper, socket_reader].map { |task| Weft.gather(task, collect: true).first }
    end
    assert_equal [ArgumentError] * 2, outcomes.map(&:class)
    # The socket's registration went away with the wait: it still works for a new one.
    writer.write("x")
    assert_equal "x", Weft.run { reader.read(1) }
  ensure
    reader&.close
    writer&.close
  end

  # Two tasks woken in one turn, the raiser first: it raises into the other before the other's
  # turn comes. That turn must not come: the other rescues and parks again, and a leftover turn
  # would end its new wait at once.
  def test_a_task_raised_into_before_its_queued_turn_is_not_resumed_by_that_turn
    log = []
    Weft.run do
      go_raiser = Thread::Queue.new
      go_target = Thread::Queue.new
      target = Weft.spawn do
        go_target.pop
        log << :target_popped
      rescue RuntimeError
        started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
        sleep 0.05
        log << (Process.clock_gettime(Process::CLOCK_MONOTONIC) - started >= 0.05 ? :slept_in_full : :woken_early)
      end
      raiser = Weft.spawn do
        go_raiser.pop
        target.fiber.raise("x")
        log << :raiser_went_on
      end
      sleep 0.01 # both are parked now
      go_raiser << 1
      go_target << 1 # both woken in this turn, the raiser first
      Weft.gather(raiser, target)
    end
    assert_equal %i[raiser_went_on slept_in_full], log
  end

  def test_a_raiser_cancelled_before_it_goes_on_is_not_woken_again
    log = []
    Weft.run do
      raiser = nil
      target = Weft.spawn do
        sleep 10
      rescue RuntimeError
        raiser.cancel # the raiser is queued to go on: it must end here, cancelled
        log << :target_rescued
      end
      raiser = Weft.spawn do
        sleep 0.01
        target.fiber.raise("x")
        log << :raiser_went_on
      end
      raiser.wait
      # The raiser's fiber is back in the pool; the next task on it must sleep undisturbed.
      Weft.spawn { sleep 0.05; log << :next_task_slept }.wait
      assert raiser.cancelled?
    end
    assert_equal %i[target_rescued next_task_slept], log
  end

  def test_transfer_into_a_task_fiber_is_refused_and_its_wait_is_untouched
    error = nil
    woke_after = nil
    Weft.run do
      started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      sleeper = Fiber.schedule do
        sleep 0.1
        woke_after = Process.clock_gettime(Process::CLOCK_MONOTONIC) - started
      end
      error = assert_raises(FiberError) { sleeper.transfer(:early) }
    end
    assert_match(/fiber that Weft runs tasks in/, error.message)
    assert_operator woke_after, :>=, 0.09
  end

  def test_raise_into_or_transfer_to_the_loop_fiber_is_refused
    loop_fiber = Fiber.current # Weft.run runs its loop in the fiber that called it
    other = nil
    errors = Weft.run do
      other = Weft.spawn { sleep 0.05; :other_done }
      [assert_raises(FiberError) { loop_fiber.transfer },
       assert_raises(FiberError) { loop_fiber.raise("boom") }]
    end
    errors.each { |error| assert_match(/reactor's loop fiber/, error.message) }
    assert_equal :other_done, other.wait
  end

  def test_raise_into_a_fiber_whose_task_has_ended_is_refused
    error = Weft.run do
      finished = Fiber.schedule { :done }
      sleep 0.01 # the fiber is back in the pool, idle
      assert_raises(FiberError) { finished.raise("late") }
    end
    assert_match(/its task has ended/, error.message)
  end

  def test_resume_and_fiber_yield_fail_in_ruby_itself
    errors = Weft.run do
      sleeper = Fiber.schedule { sleep 0.05 }
      [assert_raises(FiberError) { sleeper.resume },
       Weft.spawn { Fiber.yield }.then { |task| Weft.gather(task, collect: true).first }]
    end
    assert_match(/resume a transferring fiber/, errors[0].message)
    assert_instance_of FiberError, errors[1]
  end

  def test_fiber_kill_of_a_task_fiber_is_refused
    skip "Fiber#kill is Ruby 3.3+" unless Fiber.method_defined?(:kill)
    error = Weft.run do
      sleeper = Fiber.schedule { sleep 0.05 }
      assert_raises(FiberError) { sleeper.kill }
    end
    assert_match(/kill a fiber that Weft runs tasks in/, error.message)
  end

  def test_thread_raise_into_an_idle_reactor_unwinds_the_tasks_and_leaves_run
    cleaned = Thread::Queue.new
    reactor = Thread.new do
      Weft.run do
        Weft.spawn do
          sleep 10
        ensure
          cleaned << :task
        end
        sleep 10
      end
    end
    reactor.report_on_exception = false
    sleep 0.1 until reactor.status == "sleep" # parked in the selector
    reactor.raise(ArgumentError, "from outside")
    assert_raises(ArgumentError) { reactor.join(10) }
    assert_equal [:task], Array.new(cleaned.size) { cleaned.pop }
  end
end
