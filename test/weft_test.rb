# frozen_string_literal: true

require_relative "test_helper"

class WeftTest < Minitest::Test
  def test_run_returns_the_block_value
    assert_equal 42, Weft.run { 42 }
  end

  def test_run_raises_the_block_exception_with_its_backtrace
    error = assert_raises(RuntimeError) { Weft.run { raise "from the root task" } }
    assert_equal "from the root task", error.message
    assert_match(/weft_test\.rb/, error.backtrace.first)
  end

  def test_run_waits_for_every_spawned_task
    finished = []
    Weft.run do
      3.times { |i| Weft.spawn { sleep 0.05 * (i + 1); finished << i } }
      :root_done_first
    end
    assert_equal [0, 1, 2], finished
  end

  def test_nested_run_just_runs_the_block
    Weft.run do
      scheduler = Weft.scheduler
      assert_equal 7, Weft.run { 7 }
      assert_same scheduler, Weft.scheduler
    end
  end

  def test_run_leaves_no_scheduler_behind
    Weft.run { sleep 0.001 }
    assert_nil Fiber.scheduler
    refute Weft.running?
  end

  # Thread#kill of a thread in Weft.run ends its loop with nothing to rescue: closing the
  # scheduler then ran the tasks to their natural end (30 s here, never for an accept loop)
  # before the thread could die, and a task whose fiber the kill had unwound (it was running)
  # never ended at all. The tasks are now cancelled and the thread dies at once, every ensure
  # block run: with the reactor idle, and with a task running as the kill comes.
  def test_thread_kill_cancels_the_tasks
    [false, true].each do |busy|
      unwound = Thread::Queue.new
      running = Thread::Queue.new
      thread = Thread.new do
        Weft.run do
          Weft.spawn do
            sleep 30
          ensure
            unwound << :child
          end
          if busy
            Weft.spawn do
              running << true
              loop { 1_000.times { Math.sqrt(2) }; sleep 0 }
            ensure
              unwound << :busy
            end
          else
            Weft.spawn { running << true }
          end
          begin
            sleep 30
          ensure
            unwound << :root
          end
        end
      end
      running.pop
      thread.kill
      assert thread.join(5), "the killed thread still runs (busy: #{busy})"
      ends = Array.new(unwound.size) { unwound.pop }
      assert_equal (busy ? %i[busy child root] : %i[child root]).sort, ends.sort
    end
  end

  def test_run_refuses_a_thread_with_another_scheduler
    other = Class.new do
      %i[block unblock kernel_sleep io_wait close].each { |hook| define_method(hook) { |*| } }
    end.new
    Thread.new do
      Fiber.set_scheduler(other)
      error = assert_raises(Weft::Error) { Weft.run { 1 } }
      assert_match(/already has a fiber scheduler/, error.message)
    end.join
  end

  def test_spawn_outside_a_reactor_is_a_clear_error
    error = assert_raises(Weft::Error) { Weft.spawn { 1 } }
    assert_match(/inside Weft.run/, error.message)
  end

  def test_spawn_needs_a_block
    assert_raises(ArgumentError) { Weft.run { Weft.spawn } }
  end

  def test_timeout_raises_a_timeout_error_where_the_block_waits
    started = Weft::Timers.now
    error = assert_elapsed_under(1) do
      Weft.run do
        Weft.timeout(0.1) { sleep 5 }
      rescue Weft::TimeoutError => e
        e
      end
    end
    assert_kind_of Timeout::Error, error
    assert_match(/0.1s/, error.message)
    assert_operator Weft::Timers.now - started, :>=, 0.09
  end

  def test_timeout_returns_the_value_when_in_time
    assert_equal :ok, Weft.run { Weft.timeout(1) { sleep 0.01; :ok } }
  end

  def test_timeout_outside_a_reactor_falls_back_to_the_stdlib
    assert_raises(Weft::TimeoutError) { Weft.timeout(0.05) { sleep 1 } }
  end

  # The same duration meant different things inside a reactor and outside: nil raised TypeError
  # inside (no limit outside), 0 expired at once inside (no limit outside), a negative one
  # expired inside (ArgumentError outside), Float::INFINITY was no limit inside (RangeError
  # outside), NaN no limit in both.
  def test_timeout_durations_mean_the_same_inside_and_outside_a_reactor
    inside = ->(&block) { Weft.run(&block) }
    outside = ->(&block) { block.call }
    [inside, outside].each do |where|
      assert_equal :ok, where.call { Weft.timeout(nil) { sleep 0.01; :ok } }
      assert_equal :ok, where.call { Weft.timeout(Float::INFINITY) { sleep 0.01; :ok } }
      [0, -1].each do |seconds|
        assert_raises(Weft::TimeoutError) { where.call { Weft.timeout(seconds) { sleep 2 } } }
      end
      assert_raises(ArgumentError) { where.call { Weft.timeout(Float::NAN) { sleep 0.01 } } }
    end
  end

  def test_nested_timeouts_fire_the_inner_one_first
    result = Weft.run do
      Weft.timeout(2) do
        Weft.timeout(0.05) { sleep 1 }
      rescue Weft::TimeoutError
        :inner_fired
      end
    end
    assert_equal :inner_fired, result
  end

  def test_map_keeps_order_and_bounds_concurrency
    running = 0
    peak = 0
    results = Weft.run do
      Weft.map(1..20, concurrency: 4) do |i|
        running += 1
        peak = [peak, running].max
        sleep 0.01
        running -= 1
        i * 2
      end
    end
    assert_equal (1..20).map { |i| i * 2 }, results
    assert_equal 4, peak
  end

  # concurrency: 0 started no worker and returned a nil for every item, as if each had been
  # mapped; a negative one failed with "negative array size".
  def test_map_refuses_a_concurrency_that_runs_nothing
    Weft.run do
      [0, -1, 1.5].each do |concurrency|
        error = assert_raises(ArgumentError) { Weft.map([1, 2], concurrency: concurrency) { |x| x } }
        assert_match(/concurrency/, error.message)
      end
    end
  end

  def test_map_with_no_items
    assert_equal [], Weft.run { Weft.map([]) { |x| x } }
  end

  def test_logger_is_replaceable
    original = Weft.logger
    io = StringIO.new
    Weft.logger = Logger.new(io)
    Weft.run { Weft.spawn(name: "doomed") { raise ArgumentError, "nobody listens" }; sleep 0.01 }
    assert_match(/task doomed failed and nothing waited for it: ArgumentError: nobody listens/, io.string)
  ensure
    Weft.logger = original
  end
end
