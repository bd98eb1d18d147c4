# frozen_string_literal: true

require_relative "test_helper"

# Timed readiness waits (IO#wait_readable(seconds) and the like: the server's idle and body
# waits, the HTTP client's reads) under Scheduler::IOTimeout, which keeps one timer per fiber
# armed past the wait that armed it and re-arms it only when it fires during a wait that is not
# over yet. Whatever the timer's history, each wait must end at its own deadline: not before (a
# timer armed by an earlier, shorter or earlier-ending wait) and not much after. Coarse waits
# (the server's linger) are ended by the reactor's sweep instead: not before their deadline,
# and at most Scheduler::COARSE_INTERVAL after it (plus this machine's delays).
class IOWaitTimeoutTest < Minitest::Test
  # How late past its deadline a wait may end: the reactor's turn plus this busy, shared
  # machine's scheduling delays. Ending early is never allowed.
  LATE = 0.25
  # How much later a coarse wait may end: the sweep's interval.
  COARSE = Weft::Scheduler::COARSE_INTERVAL

  def setup
    @sockets = []
  end

  def teardown
    @sockets.each(&:close)
  end

  def test_a_silent_wait_ends_at_its_timeout
    reader, = socket_pair
    result, elapsed = Weft.run { timed { reader.wait_readable(0.05) } }
    assert_nil result
    assert_on_time 0.05, elapsed
  end

  def test_a_wait_that_ends_in_time_returns_the_io
    reader, writer = socket_pair
    result, elapsed = Weft.run do
      Weft.spawn { sleep 0.02; writer.write("x") }
      timed { reader.wait_readable(1) }
    end
    assert_equal reader, result
    assert_operator elapsed, :<, 0.5
  end

  # The first wait arms the timer for t+0.2 and ends at t+0.1; the second runs to t+0.3. When
  # the timer fires at t+0.2 the second wait has 0.1 s left: it must be re-armed, not ended.
  def test_a_later_deadline_re_arms_the_timer_when_it_fires
    reader, writer = socket_pair
    Weft.run do
      Weft.spawn { sleep 0.1; writer.write("x") }
      assert_equal reader, reader.wait_readable(0.2)
      reader.read_nonblock(1)
      result, elapsed = timed { reader.wait_readable(0.2) }
      assert_nil result
      assert_on_time 0.2, elapsed
    end
  end

  # A shorter wait after a long one that ended at once: the timer, armed 5 s out, must move in.
  def test_an_earlier_deadline_moves_the_timer_in
    reader, writer = socket_pair
    Weft.run do
      writer.write("x")
      assert_equal reader, reader.wait_readable(5)
      reader.read_nonblock(1)
      result, elapsed = timed { reader.wait_readable(0.05) }
      assert_nil result
      assert_on_time 0.05, elapsed
    end
  end

  def test_a_fiber_waits_again_after_a_timeout
    reader, writer = socket_pair
    Weft.run do
      3.times do
        result, elapsed = timed { reader.wait_readable(0.03) }
        assert_nil result
        assert_on_time 0.03, elapsed
      end
      Weft.spawn { sleep 0.05; writer.write("x") }
      result, elapsed = timed { reader.wait_readable(0.5) }
      assert_equal reader, result
      assert_operator elapsed, :<, 0.45
    end
  end

  # Waits that end in time leave one timer armed however many there were; once it comes due
  # with no wait on, it lapses and leaves the reactor's timers.
  def test_waits_that_end_in_time_share_one_timer_which_lapses
    reader, writer = socket_pair
    counts = Weft.run do
      100.times do
        writer.write("x")
        reader.wait_readable(0.1)
        reader.read_nonblock(1)
      end
      during = Weft.scheduler.statistics[:timers]
      sleep 0.15
      [during, Weft.scheduler.statistics[:timers]]
    end
    assert_equal [1, 0], counts
  end

  # A wait cut short by cancellation leaves its timer armed; the pooled fiber then runs another
  # task, which waits on a Queue with no timeout. The old timer firing meanwhile must not end
  # that wait (it would return false from Queue#pop's wait, or resume the fiber out of turn).
  def test_a_cancelled_wait_leaves_no_wake_up_for_the_fibers_next_task
    reader, = socket_pair
    Weft.run do
      waiter_fiber = nil
      waiter = Weft.spawn do
        waiter_fiber = Fiber.current
        reader.wait_readable(0.05)
      end
      sleep 0.01
      waiter.cancel
      waiter.wait
      assert_predicate waiter, :cancelled?
      queue = Thread::Queue.new
      popper = Weft.spawn { [Fiber.current, timed { queue.pop }] }
      sleep 0.15 # past the cancelled wait's deadline
      queue << :late
      fiber, (value, elapsed) = popper.wait
      assert_same waiter_fiber, fiber, "the test needs the pooled fiber to be reused"
      assert_equal :late, value
      assert_operator elapsed, :>=, 0.1
    end
  end

  def test_a_sleep_after_a_timed_wait_is_not_cut_short
    reader, writer = socket_pair
    Weft.run do
      writer.write("x")
      reader.wait_readable(0.03) # ends at once; its timer stays armed for 30 ms
      _, elapsed = timed { sleep 0.1 }
      assert_operator elapsed, :>=, 0.1
    end
  end

  # Many fibers, each with its own timeout, each first served in time a few times (their
  # timers armed once and left alone) and then left silent: each times out at its own deadline.
  def test_many_connections_with_different_deadlines
    pairs = Array.new(40) { socket_pair }
    outcomes = Weft.run do
      Weft.map(pairs.each_with_index.to_a) do |(reader, writer), i|
        # Wide margins: the writers start a turn late, and this machine's turns can be slow.
        timeout = 0.2 + (0.02 * (i % 8))
        served = Array.new(3) do
          Weft.spawn { sleep timeout / 10; writer.write("x") }
          ready = reader.wait_readable(timeout)
          reader.read_nonblock(1)
          ready
        end
        result, elapsed = timed { reader.wait_readable(timeout) }
        [served, result, timeout, elapsed]
      end
    end
    pairs.each_with_index do |(reader, _), i|
      served, result, timeout, elapsed = outcomes[i]
      assert_equal [reader] * 3, served
      assert_nil result
      assert_on_time timeout, elapsed
    end
  end

  # A worker fiber that ends (the pool is full) must not be kept alive by its timer.
  def test_a_fiber_that_ends_disarms_its_timer
    result, statistics, reader = wait_in_an_unpooled_fiber { |io| io.wait_readable(5) }
    assert_same reader, result
    assert_equal 0, statistics[:timers]
  end

  # --- Coarse waits (Scheduler#io_wait_coarse): ended by the reactor's sweep, no timer each ---

  def test_a_silent_coarse_wait_ends_after_its_timeout_within_the_sweep_interval
    reader, = socket_pair
    outcomes = Weft.run do
      Array.new(5) { timed { coarse_wait(reader, 0.05) } }
    end
    outcomes.each do |result, elapsed|
      assert_equal false, result
      assert_on_time 0.05, elapsed, late: COARSE + LATE
    end
  end

  def test_a_coarse_wait_that_ends_in_time_returns_the_events
    reader, writer = socket_pair
    result, elapsed = Weft.run do
      Weft.spawn { sleep 0.02; writer.write("x") }
      timed { coarse_wait(reader, 1) }
    end
    assert_equal IO::READABLE, result
    assert_operator elapsed, :<, 0.5
  end

  # The server's case: many fibers whose waits are renewed again and again (each served in
  # time), then left silent. No renewed wait times out, and each silent one ends on time. The
  # sweep holds the fibers only while they wait: afterwards its timer lapses.
  def test_many_renewed_coarse_waits_then_silence
    pairs = Array.new(64) { socket_pair }
    outcomes, last_write, after = Weft.run do
      last_write = nil
      Weft.spawn do
        # A byte for every fiber every 10 ms for 0.3 s: far within their timeouts.
        30.times do
          sleep 0.01
          pairs.each { |_, writer| writer.write("x") }
        end
        last_write = Weft::Timers.now
      end
      outcomes = Weft.map(pairs.each_with_index.to_a) do |(reader, _), i|
        timeout = 0.1 + (0.01 * (i % 4))
        reader.read_nonblock(100) while coarse_wait(reader, timeout)
        timed_out = Weft::Timers.now
        [timeout, timed_out, *timed { coarse_wait(reader, timeout) }]
      end
      sleep 3 * COARSE # past the next sweeps: each finds every fiber in no wait
      [outcomes, last_write, Weft.scheduler.statistics.values_at(:coarse_waiters, :timers)]
    end
    outcomes.each do |timeout, timed_out, result, elapsed|
      # A renewed wait that timed out would have ended the loop before the last write.
      assert_operator timed_out - last_write, :>=, timeout, "a renewed wait (timeout #{timeout}) timed out"
      assert_equal false, result
      assert_on_time timeout, elapsed, late: COARSE + LATE
    end
    assert_equal [0, 0], after
  end

  # A fiber's exact timer, armed by an exact wait that ended at once, fires during a later
  # coarse wait: it must neither end nor re-arm for that wait. And the sweep must not end an
  # exact wait that follows a coarse one.
  def test_exact_and_coarse_waits_of_one_fiber_do_not_end_each_other
    reader, writer = socket_pair
    Weft.run do
      writer.write("x")
      assert_equal reader, reader.wait_readable(0.03) # exact: its timer fires 30 ms on
      reader.read_nonblock(1)
      result, elapsed = timed { coarse_wait(reader, 0.15) }
      assert_equal false, result
      assert_on_time 0.15, elapsed, late: COARSE + LATE

      writer.write("x")
      assert_equal IO::READABLE, coarse_wait(reader, 0.03) # coarse: held by the sweep
      reader.read_nonblock(1)
      result, elapsed = timed { reader.wait_readable(0.15) }
      assert_nil result
      assert_on_time 0.15, elapsed
    end
  end

  # As for the exact timer above: a coarse wait cut short by cancellation must not end a wait
  # of the pooled fiber's next task.
  def test_a_cancelled_coarse_wait_leaves_no_wake_up_for_the_fibers_next_task
    reader, = socket_pair
    Weft.run do
      waiter_fiber = nil
      waiter = Weft.spawn do
        waiter_fiber = Fiber.current
        coarse_wait(reader, 0.05)
      end
      sleep 0.01
      waiter.cancel
      waiter.wait
      assert_predicate waiter, :cancelled?
      queue = Thread::Queue.new
      popper = Weft.spawn { [Fiber.current, timed { queue.pop }] }
      sleep 0.15 # past the cancelled wait's deadline, several sweeps
      queue << :late
      fiber, (value, elapsed) = popper.wait
      assert_same waiter_fiber, fiber, "the test needs the pooled fiber to be reused"
      assert_equal :late, value
      assert_operator elapsed, :>=, 0.1
    end
  end

  # The server's request loop fetches its fiber's waiter once (Scheduler#coarse_waiter) and
  # waits with it for every request: each wait is a coarse wait like #io_wait_coarse's.
  def test_a_fibers_coarse_waiter_serves_wait_after_wait
    reader, writer = socket_pair
    Weft.run do
      waiter = Weft.scheduler.coarse_waiter
      assert_same waiter, Weft.scheduler.coarse_waiter, "one per fiber and reactor"
      3.times do
        Weft.spawn { sleep 0.01; writer.write("x") }
        assert_equal IO::READABLE, waiter.wait_coarse(reader, IO::READABLE, 1)
        reader.read_nonblock(1)
      end
      result, elapsed = timed { waiter.wait_coarse(reader, IO::READABLE, 0.05) }
      assert_equal false, result
      assert_on_time 0.05, elapsed, late: COARSE + LATE
      refute_same waiter, Weft.spawn { Weft.scheduler.coarse_waiter }.wait, "another fiber's is its own"
    end
  end

  # A worker fiber that ends (the pool is full) leaves the sweep at once.
  def test_a_fiber_that_ends_leaves_the_sweep
    result, statistics = wait_in_an_unpooled_fiber { |reader| coarse_wait(reader, 5) }
    assert_equal IO::READABLE, result
    assert_equal 0, statistics[:coarse_waiters]
  end

  private

  # Runs the block with a readable socket in a task of a scheduler that keeps no worker fibers
  # (the task's fiber ends with it).
  # @return [Array(Object, Hash, IO)] what the block returned, the scheduler's statistics once
  #   it has run, and the socket
  def wait_in_an_unpooled_fiber
    reader, writer = socket_pair
    writer.write("x")
    scheduler = Weft::Scheduler.new(fiber_pool_size: 0)
    Fiber.set_scheduler(scheduler)
    task = scheduler.spawn(nil, "waiter", [], proc { yield reader })
    scheduler.run
    [task.wait, scheduler.statistics, reader]
  ensure
    Fiber.set_scheduler(nil)
  end

  def coarse_wait(io, timeout)
    Weft.scheduler.io_wait_coarse(io, IO::READABLE, timeout)
  end

  def socket_pair
    UNIXSocket.pair.tap { |pair| @sockets.concat(pair) }
  end

  def assert_on_time(timeout, elapsed, late: LATE)
    assert_operator elapsed, :>=, timeout, "ended early"
    assert_operator elapsed, :<, timeout + late, "ended late"
  end
end
