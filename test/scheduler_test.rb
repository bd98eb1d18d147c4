# frozen_string_literal: true

require_relative "test_helper"
require "net/http"
require "open3"
require "rbconfig"

# Plain blocking Ruby, unchanged, becomes concurrent under Weft's scheduler.
class SchedulerTest < Minitest::Test
  # One after another they would take 500 s; 2 s is four sleeps' worth, so the bound still
  # proves they overlap, with room for a loaded machine (1.048 s was seen at load 4.8).
  def test_a_thousand_sleeps_overlap
    results = assert_elapsed_under(2.0) do
      Weft.run { Weft.gather(Array.new(1000) { |i| Weft.spawn { sleep 0.5; i } }) }
    end
    assert_equal (0...1000).to_a, results
  end

  def test_fifty_net_http_gets_overlap
    server = TCPServer.new("127.0.0.1", 0)
    port = server.addr[1]
    # A slow upstream on its own threads, outside the reactor: each answer takes 300 ms.
    acceptor = Thread.new do
      loop do
        client = server.accept
        Thread.new(client) do |socket|
          socket.gets("\r\n\r\n")
          sleep 0.3
          socket.write("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
        ensure
          socket.close
        end
      end
    rescue IOError
      nil # closed at the end of the test
    end

    bodies = assert_elapsed_under(1.0) do
      Weft.run do
        Weft.map(1..50) { Net::HTTP.get(URI("http://127.0.0.1:#{port}/")) }
      end
    end
    assert_equal ["ok"] * 50, bodies
  ensure
    server&.close
    acceptor&.join(1)
  end

  def test_queue_hands_off_between_tasks_and_from_a_thread
    received = Weft.run do
      queue = Thread::Queue.new
      consumer = Weft.spawn { Array.new(6) { queue.pop } }
      Weft.spawn { 3.times { |i| queue << [:task, i]; sleep 0.01 } }
      Thread.new { 3.times { |i| sleep 0.01; queue << [:thread, i] } }
      consumer.wait
    end
    assert_equal [0, 1, 2], received.select { |from, _| from == :task }.map(&:last)
    assert_equal [0, 1, 2], received.select { |from, _| from == :thread }.map(&:last)
  end

  def test_a_thread_waits_for_a_task_through_a_queue
    queue = Thread::Queue.new
    reply = Thread::Queue.new
    thread = Thread.new { reply.pop } # a plain thread, blocked on the reactor's answer
    Weft.run do
      Weft.spawn { queue << :ping }
      sleep 0.01
      reply << queue.pop
    end
    assert_equal :ping, thread.value
  end

  def test_mutex_serialises_tasks_without_blocking_the_reactor
    mutex = Thread::Mutex.new
    inside = 0
    peak = 0
    ticks = 0
    Weft.run do
      ticker = Weft.spawn { loop { sleep 0.005; ticks += 1 } }
      Weft.gather(Array.new(5) do
        Weft.spawn do
          mutex.synchronize do
            inside += 1
            peak = [peak, inside].max
            sleep 0.02
            inside -= 1
          end
        end
      end)
      ticker.cancel
    end
    assert_equal 1, peak
    assert_operator ticks, :>=, 5, "the reactor kept running other tasks while they queued"
  end

  def test_mutex_shared_with_a_thread
    mutex = Thread::Mutex.new
    log = []
    holder = Thread.new { mutex.synchronize { sleep 0.1; log << :thread } }
    sleep 0.02
    Weft.run { mutex.synchronize { log << :task } }
    holder.join
    assert_equal %i[thread task], log
  end

  def test_condition_variable_signals_a_task_from_a_task_and_from_a_thread
    mutex = Thread::Mutex.new
    condition = Thread::ConditionVariable.new
    ready = []
    Weft.run do
      waiters = Array.new(2) do
        Weft.spawn do
          mutex.synchronize do
            condition.wait(mutex) while ready.empty?
            ready.shift
          end
        end
      end
      sleep 0.01
      mutex.synchronize { ready << :from_task; condition.signal }
      Thread.new { sleep 0.01; mutex.synchronize { ready << :from_thread; condition.signal } }.join
      assert_equal %i[from_task from_thread].sort, waiters.map(&:wait).sort
    end
  end

  def test_condition_variable_wait_times_out
    mutex = Thread::Mutex.new
    condition = Thread::ConditionVariable.new
    assert_elapsed_under(1) do
      Weft.run { mutex.synchronize { condition.wait(mutex, 0.05) } }
    end
  end

  # Interrupted inside ConditionVariable#wait, the wait still returns holding the mutex, so
  # the timeout (not "Attempt to unlock a mutex which is not locked") reaches the caller. Ruby
  # 3.1 needs Weft::MutexSleepFix for this; 3.3 does it itself.
  def test_a_timeout_in_a_condition_wait_leaves_the_mutex_locked_for_synchronize
    mutex = Thread::Mutex.new
    condition = Thread::ConditionVariable.new
    error = Weft.run do
      Weft.timeout(0.05) { mutex.synchronize { condition.wait(mutex) } }
    rescue Exception => e # rubocop:disable Lint/RescueException
      e
    end
    assert_kind_of Weft::TimeoutError, error
    refute mutex.locked?
  end

  def test_stdlib_timeout_needs_no_thread
    threads_before = Thread.list.size
    error = Weft.run do
      Timeout.timeout(0.05) do
        assert_equal threads_before, Thread.list.size
        sleep 2
      end
    rescue Timeout::Error => e
      e
    end
    assert_kind_of Timeout::Error, error
  end

  def test_timeout_interrupts_a_blocking_socket_read
    reader, writer = UNIXSocket.pair
    result = assert_elapsed_under(1) do
      Weft.run do
        Timeout.timeout(0.05) { reader.read(10) }
      rescue Timeout::Error
        :timed_out
      end
    end
    assert_equal :timed_out, result
  ensure
    reader&.close
    writer&.close
  end

  def test_localhost_resolves_while_other_tasks_run
    addresses, ticks = Weft.run do
      ticks = 0
      ticker = Weft.spawn { loop { sleep 0.001; ticks += 1 } }
      found = Addrinfo.getaddrinfo("localhost", 80, nil, :STREAM).map(&:ip_address)
      ticker.cancel
      [found, ticks]
    end
    assert_includes addresses, "127.0.0.1"
    assert_operator ticks, :>=, 0
  end

  def test_unknown_host_raises_socket_error
    assert_raises(SocketError) do
      Weft.run { TCPSocket.new("no-such-host.invalid", 80) }
    end
  end

  def test_tcp_socket_connects_by_name
    server = TCPServer.new("127.0.0.1", 0)
    reply = Weft.run do
      Weft.spawn { client = server.accept; client.write("hi"); client.close }
      TCPSocket.open("localhost", server.addr[1]) { |socket| socket.read }
    end
    assert_equal "hi", reply
  ensure
    server&.close
  end

  # The child exits only when a task of this process tells it to (a byte on its stdin), and that
  # task runs only once the wait has begun: the wait returning at all proves that other tasks ran
  # while it waited (a wait that held the reactor would leave the child to its own deadline, 5 s,
  # and exit 4). The bound is on the wait's end after the child was told, not on the child's
  # start: a `ruby -e` child spent its boot (1 s quiet, 3.3 s seen at load 7) inside a 2 s bound.
  def test_process_wait_lets_other_tasks_run
    ticks = 0
    waiting = told_while_waiting = false
    told_at = nil
    status, returned_at = Weft.run do
      reader, writer = IO.pipe
      child = "timeout 5 head -c 1 | grep -q x && exit 3; exit 4"
      pid = Process.spawn("sh", "-c", child, in: reader)
      reader.close
      Weft.spawn do
        3.times { sleep 0.01; ticks += 1 }
        told_while_waiting = waiting
        told_at = Process.clock_gettime(Process::CLOCK_MONOTONIC)
        writer.write("x")
        writer.close
      end
      waiting = true
      Process.wait(pid)
      [$?, Process.clock_gettime(Process::CLOCK_MONOTONIC)]
    end
    assert_equal 3, status.exitstatus, "the child was not told to exit while this process waited for it"
    assert told_while_waiting, "the other task ran before the wait began: nothing was tested"
    assert_equal 3, ticks
    assert_operator returned_at - told_at, :<, 2, "the wait returned long after the child was told to exit"
  end

  def test_a_process_can_be_waited_for_again_after_an_interrupted_wait
    status = assert_elapsed_under(2) do
      Weft.run do
        pid = Process.spawn("sleep", "0.3")
        assert_raises(Weft::TimeoutError) { Weft.timeout(0.05) { Process.wait(pid) } }
        Process.wait2(pid).last
      end
    end
    assert_predicate status, :success?
  end

  def test_popen_and_io_read_write_through_the_selector
    output = Weft.run do
      IO.popen([RbConfig.ruby, "-e", "sleep 0.05; print STDIN.read.upcase"], "r+") do |io|
        io.write("weft")
        io.close_write
        io.read
      end
    end
    assert_equal "WEFT", output
  end

  def test_pipes_read_and_write_large_payloads_concurrently
    payload = "x" * 1_000_000
    received = Weft.run do
      reader, writer = IO.pipe
      Weft.spawn { writer.write(payload); writer.close }
      data = reader.read
      reader.close
      data
    end
    assert_equal payload.bytesize, received.bytesize
  end

  # A command that exits without reading all its input (head): the write waiting for room in
  # the full pipe must fail with EPIPE, as without Weft. It waited forever: epoll reports only
  # EPOLLERR on a pipe's write end when its read end closes, which io-event calls readable.
  def test_a_write_to_a_pipe_whose_reader_exits_raises_epipe
    outcome = Weft.run do
      Open3.popen2("head", "-c", "10") do |stdin, stdout, waiter|
        stdin.write("x" * 10_000_000)
        :written
      rescue Errno::EPIPE
        [:epipe, stdout.read, waiter.value.success?]
      end
    end
    assert_equal [:epipe, "x" * 10, true], outcome
  end

  # Closing an IO that another task waits on takes its descriptor out of epoll with no event:
  # the reader waited forever, and Weft.run with it. It gets IOError, as a thread would; so
  # does each of several waiters on one IO, and a later wait on another IO is not disturbed.
  def test_closing_an_io_raises_ioerror_in_the_tasks_waiting_on_it
    outcomes = Weft.run do
      reader, writer = IO.pipe
      left, right = UNIXSocket.pair
      pipe_reader = Weft.spawn { reader.read(1) }
      socket_readers = Array.new(2) { Weft.spawn { left.read(1) } }
      untouched = Weft.spawn { right.read(1) }
      sleep 0.05
      reader.close
      left.close
      writer.close
      [pipe_reader, *socket_readers].map { |task| (task.wait rescue $!) } + [untouched.wait]
    ensure
      right&.close
    end
    assert_equal [IOError] * 3 + [NilClass], outcomes.map(&:class), outcomes.inspect
    assert_equal ["stream closed in another fiber"] * 3, outcomes.first(3).map(&:message)
  end

  # Closed on another thread, an IO a task read made Ruby raise its own IOError into the
  # reactor's loop (Weft.run raised "stream closed in another thread", the other tasks lost), and
  # one a task waited on with wait_readable went unnoticed (Weft.run hung). The close is done on
  # the reactor's thread: the waiting tasks get IOError, the others finish, and the closing
  # thread returns once the IO is closed.
  def test_closing_on_another_thread_raises_ioerror_only_in_the_tasks_waiting_on_the_io
    pipe_reader, pipe_writer = IO.pipe
    left, right = UNIXSocket.pair
    closer_saw = nil
    reactor = Thread.new do
      Weft.run do
        reading = Weft.spawn { pipe_reader.read(1) }
        waiting = Weft.spawn { left.wait_readable }
        sleeper = Weft.spawn { 4.times { sleep 0.05 }; :slept }
        sleep 0.05
        Thread.new do
          pipe_reader.close
          left.close
          closer_saw = [pipe_reader.closed?, left.closed?]
        end.join
        [reading, waiting, sleeper].map { |task| (task.wait rescue $!) }
      end
    end
    assert reactor.join(5), "Weft.run ended within 5 s"
    outcomes = reactor.value
    assert_equal [IOError, IOError, :slept], outcomes.map { |o| o.is_a?(Exception) ? o.class : o }, outcomes.inspect
    assert_equal ["stream closed in another thread"] * 2, outcomes.first(2).map(&:message)
    assert_equal [true, true], closer_saw
  ensure
    reactor&.kill
    [pipe_writer, right].each { |io| io&.close }
  end

  # The closer may be a task of a reactor of its own, on its thread: it waits for the close
  # without blocking its reactor, and the reactor whose task waited on the IO goes on.
  def test_a_task_of_another_reactor_closing_an_io_waits_for_the_close_without_blocking
    reader, writer = IO.pipe
    waiter_started = Thread::Queue.new
    waiter = Thread.new do
      Weft.run do
        task = Weft.spawn { reader.read(1) }
        sleep 0.02
        waiter_started << true
        [(task.wait rescue $!).class, Weft.spawn { sleep 0.05; :after }.wait]
      end
    end
    waiter_started.pop
    ticks = 0
    Weft.run do
      ticker = Weft.spawn { 5.times { sleep 0.01; ticks += 1 } }
      reader.close
      ticker.wait
    end
    assert waiter.join(5), "the reactor whose task waited on the IO ended"
    assert_equal [IOError, :after], waiter.value
    assert_equal 5, ticks
  ensure
    writer&.close
  end

  # A close handed to a reactor that closes before its loop takes it is done as the reactor
  # closes (its caller would wait forever otherwise), and a reactor that has closed refuses
  # the hand-off, so that the caller closes the IO itself.
  def test_a_close_handed_to_a_closing_reactor_is_done_and_a_closed_one_refuses_it
    reader, writer = IO.pipe
    scheduler = Weft::Scheduler.new
    outcome = scheduler.close_from_any_thread(reader)
    refute reader.closed?
    scheduler.close
    assert reader.closed?
    assert_nil outcome.pop
    assert_nil scheduler.close_from_any_thread(writer)
    refute_includes [Weft::Scheduler.waiting_elsewhere(writer, nil)], scheduler
  ensure
    writer&.close
  end

  # Cancel, then close, in one turn (the server's shutdown of its accept loops): the task ends
  # cancelled, by the cancellation on its way, not failed with the IOError of the close.
  def test_a_task_cancelled_and_then_closed_on_ends_cancelled
    statuses = Weft.run do
      listener = TCPServer.new("127.0.0.1", 0)
      accepter = Weft.spawn { listener.wait_readable }
      sleep 0.02
      accepter.cancel
      listener.close
      accepter.wait
      [accepter.status, accepter.error.class]
    end
    assert_equal [:cancelled, Weft::Cancelled], statuses
  end

  def test_io_wait_with_timeout
    reader, writer = IO.pipe
    result = Weft.run { reader.wait_readable(0.05) }
    assert_nil result
    writer.write("!")
    assert_equal reader, Weft.run { reader.wait_readable(1) }
  ensure
    reader&.close
    writer&.close
  end

  def test_unblock_from_many_threads
    queue = Thread::Queue.new
    count = Weft.run do
      consumer = Weft.spawn { Array.new(400) { queue.pop }.size }
      Array.new(4) { Thread.new { 100.times { queue << 1 } } }.each(&:join)
      consumer.wait
    end
    assert_equal 400, count
  end

  def test_statistics
    stats = Weft.run do
      Weft.spawn { sleep 0.01 }
      sleep 0 # let it start and arm its timer
      Weft.scheduler.statistics
    end
    assert_equal 2, stats[:tasks]
    assert_equal 1, stats[:timers]
    assert_operator stats[:spawned], :>=, 2
  end

  # An idle reactor blocks in its poll until the socket is ready: the readiness floor is when
  # that poll returned, i.e. when the peer wrote (here from another thread, 50 ms on).
  def test_readiness_floor_after_a_blocking_poll_is_when_the_io_became_ready
    reader, writer = UNIXSocket.pair
    since = floor = written_at = woken_at = nil
    Weft.run do
      peer = Thread.new do
        sleep 0.05
        written_at = Weft::Timers.now
        writer.write("x")
        # A poll may find nothing until the byte is in: under load this thread can lose the CPU
        # between the clock read and the write (the floor came out up to 1.1 ms after it).
        written_by = Weft::Timers.now
      end
      since = Weft::Timers.now
      reader.wait_readable
      floor = Weft.scheduler.readiness_floor(since)
      woken_at = Weft::Timers.now
      peer.join
    end
    assert_operator floor, :>=, written_at - 0.001, "the floor is before the write"
    assert_operator floor, :<=, woken_at
    assert_operator floor - since, :>=, 0.045
  ensure
    reader&.close
    writer&.close
  end

  # A busy reactor gets to a ready socket late: the fiber that made it ready (by writing to
  # the peer) spins for 50 ms before it lets the reactor poll. The readiness floor does not
  # count that delay: nothing tells the reactor that the socket was not ready all along since
  # the reader last looked.
  def test_readiness_floor_does_not_count_the_time_other_fibers_ran
    reader, writer = UNIXSocket.pair
    since = floor = woken_at = written_at = nil
    Weft.run do
      waiting = Weft.spawn do
        since = Weft::Timers.now
        reader.wait_readable
        floor = Weft.scheduler.readiness_floor(since)
        woken_at = Weft::Timers.now
      end
      Weft.spawn do
        written_at = Weft::Timers.now
        writer.write("x")
        spin_until = Weft::Timers.now + 0.05
        nil while Weft::Timers.now < spin_until
      end
      waiting.wait
    end
    assert_operator woken_at - written_at, :>=, 0.05
    # No poll found the socket not ready while it waited: the reactor cannot tell.
    assert(floor.nil? || floor <= written_at + 0.005, "the floor counts the 50 ms another fiber ran")
  ensure
    reader&.close
    writer&.close
  end

  # While the reactor keeps polling (fibers ready every turn, so no poll blocks), the floor
  # moves with the polls that did not find the socket ready: a socket that becomes ready
  # 50 ms after the reader last looked has a floor near 50 ms, not at the last look.
  #
  # The floor is checked against the spinner's turns, not against the write's time less a
  # margin: each spin ends just before the reactor polls, so the poll after the last spin but
  # one that ended before the write found nothing (the next spin began after it), and the floor
  # is at that spin's end at least. Where other processes take the core away, the last poll
  # before the write can come 30 ms before it (the margin of 20 ms failed at load 9).
  def test_readiness_floor_follows_the_polls_that_found_nothing
    reader, writer = UNIXSocket.pair
    since = floor = written_at = written_by = nil
    spins_ended = []
    Weft.run do
      stop = false
      spinner = Weft.spawn do
        until stop
          spin_until = Weft::Timers.now + 0.002
          nil while Weft::Timers.now < spin_until
          spins_ended << Weft::Timers.now
          sleep 0
        end
      end
      peer = Thread.new do
        sleep 0.05
        written_at = Weft::Timers.now
        writer.write("x")
        # A poll may find nothing until the byte is in: under load this thread can lose the CPU
        # between the clock read and the write (the floor came out up to 1.1 ms after it).
        written_by = Weft::Timers.now
      end
      since = Weft::Timers.now
      reader.wait_readable
      floor = Weft.scheduler.readiness_floor(since)
      stop = true
      peer.join
      spinner.wait
    end
    assert_operator floor, :<=, written_by + 0.001
    before_write = spins_ended.select { |ended| ended < written_at }
    assert_operator before_write.size, :>=, 2, "the spinner did not run while the reader waited"
    assert_operator floor, :>=, before_write[-2], "the floor is behind a poll that found nothing"
  ensure
    reader&.close
    writer&.close
  end

  # A wait that times out on an idle reactor: the poll blocked until the timeout, so the
  # reactor looked at the socket at the moment the wait ran out.
  def test_a_wait_timed_out_on_an_idle_reactor_was_watched_to_its_end
    reader, writer = UNIXSocket.pair
    ends_at = watched = nil
    Weft.run do
      ends_at = Weft::Timers.now + 0.05
      refute reader.wait_readable(0.05), "nothing was written"
      watched = Weft.scheduler.watched?(ends_at)
    end
    assert watched, "the reactor did not look at the socket through the timeout"
  ensure
    reader&.close
    writer&.close
  end

  # A fiber that a poll resumed for I/O writes to another fiber's socket and keeps the CPU for
  # 100 ms, past that fiber's 50 ms timeout. The poll looked before the write: the timer waits
  # for the next poll, which finds the socket ready, and the wait ends with its I/O. A wait on a
  # socket nobody writes to times out after that poll, which looked past its moment.
  #
  # That needs the poll that resumes the busy fiber to come before the 50 ms are up. Where other
  # processes take this one's core for longer (load 7), it came after them: that poll looked past
  # the moment before the write, and the timeout rightly fired. Such a run tests nothing and is
  # tried again, up to TIMER_ATTEMPTS times.
  def test_a_timer_fires_only_after_the_reactor_looked_past_its_moment
    attempts = 0
    ready = timed_out = watched = nil
    loop do
      attempts += 1
      ready, timed_out, watched, in_time = timer_after_a_busy_fiber
      break if in_time

      flunk "the busy fiber was never resumed within the 50 ms in #{attempts} attempts" if attempts == TIMER_ATTEMPTS
    end
    assert ready, "the wait timed out with its socket readable"
    assert timed_out
    assert watched, "the timeout fired before the reactor looked past its moment"
  end

  TIMER_ATTEMPTS = 5

  # One run of the test above.
  # @return [Array(Boolean, Boolean, Boolean, Boolean)] whether the answered wait ended with its
  #   I/O, the silent one timed out, the reactor had looked past the silent one's moment, and the
  #   busy fiber was resumed before the answered wait's moment (else the run tested nothing)
  def timer_after_a_busy_fiber
    reader, writer = UNIXSocket.pair
    silent, silent_peer = UNIXSocket.pair
    busy_reader, busy_writer = UNIXSocket.pair
    ready = timed_out = watched = resumed_at = moment = nil
    Weft.run do
      busy = Weft.spawn do
        busy_reader.wait_readable
        resumed_at = Weft::Timers.now
        writer.write("x")
        spin_until = Weft::Timers.now + 0.1
        nil while Weft::Timers.now < spin_until
      end
      answered = Weft.spawn do
        moment = Weft::Timers.now + 0.05
        ready = reader.wait_readable(0.05)
      end
      silence = Weft.spawn do
        ends_at = Weft::Timers.now + 0.05
        timed_out = !silent.wait_readable(0.05)
        watched = Weft.scheduler.watched?(ends_at)
      end
      Weft.spawn { busy_writer.write("x") } # the next poll resumes the busy fiber
      [answered, silence, busy].each(&:wait)
    end
    [ready, timed_out, watched, resumed_at < moment]
  ensure
    [reader, writer, silent, silent_peer, busy_reader, busy_writer].each { |io| io&.close }
  end

  # Two tasks handing a token back and forth through Queues keep a fiber ready on every turn:
  # the loop looks for I/O once per POLL_GAP then, not on every turn (it did: two epoll_waits
  # per round trip), and still that often, so a socket read and a sleep in other tasks end
  # on time while the hand-offs go on.
  def test_fibers_that_keep_each_other_ready_do_not_poll_every_turn_and_io_still_comes_through
    reader, writer = UNIXSocket.pair
    trips = polls = read_late = overslept = nil
    Weft.run do
      ping = Thread::Queue.new
      pong = Thread::Queue.new
      player = Weft.spawn { while (token = ping.pop); pong << token; end }
      written_at = nil
      reading = Weft.spawn do
        reader.wait_readable
        read_late = Weft::Timers.now - written_at
      end
      sleeping = Weft.spawn do
        started = Weft::Timers.now
        sleep 0.02
        overslept = Weft::Timers.now - started - 0.02
      end
      peer = Thread.new do
        sleep 0.02
        written_at = Weft::Timers.now
        writer.write("x")
      end
      sleep 0 # the tasks start and park
      polls = Weft.scheduler.statistics[:polls]
      trips = 0
      until reading.done? && sleeping.done?
        ping << trips
        pong.pop
        trips += 1
      end
      polls = Weft.scheduler.statistics[:polls] - polls
      ping << nil
      player.wait
      peer.join
    end
    assert_operator trips, :>, 100, "too few hand-offs meanwhile: nothing was tested"
    assert_operator polls, :<, trips / 2, "the loop polled on most turns (#{polls} polls, #{trips} round trips)"
    assert_operator read_late, :<, 0.02, "the socket's data waited for the hand-offs"
    assert_operator overslept, :<, 0.02, "the sleep waited for the hand-offs"
  ensure
    reader&.close
    writer&.close
  end

  def test_a_blocking_call_in_the_loop_fiber_is_refused
    scheduler = Weft::Scheduler.new
    error = assert_raises(Weft::Error) { scheduler.suspend(0.01) }
    assert_match(/loop fiber/, error.message)
  ensure
    scheduler&.close
  end

  # A timer at infinity (Timeout.timeout(Float::INFINITY), a limit meaning "none") was the poll's
  # timeout while nothing else was due: epoll_wait raised EINVAL in the loop fiber, and Weft.run
  # failed with it, every task cancelled. A NaN duration (sleep(Float::NAN)) did the same. Now
  # the first waits as long as it takes and the second fails in its own task.
  def test_infinite_and_nan_durations_leave_the_reactor_running
    queue = Thread::Queue.new
    pusher = Thread.new { sleep 0.1; queue << :pushed }
    popped, nan_error = Weft.run do
      nan_sleep = Weft.spawn { sleep(Float::NAN) }
      [Timeout.timeout(Float::INFINITY) { queue.pop }, (nan_sleep.wait rescue $!)]
    end
    assert_equal :pushed, popped
    assert_kind_of ArgumentError, nan_error
  ensure
    pusher&.join
  end

  # However a wait in #suspend ends (woken, timed out, raised into), the fiber leaves the
  # reactor's books: a later wake-up for it is refused, rather than queueing a fiber that waits
  # for something else (here: the next task of its pooled fiber) to be resumed with its value.
  def test_a_wake_up_after_the_wait_ended_is_refused
    Weft.run do
      scheduler = Fiber.scheduler
      fibers = {}
      parked = lambda do |name, timeout|
        Weft.spawn do
          fibers[name] = Fiber.current
          scheduler.suspend(timeout, :blocker)
        end
      end
      woken = parked.call(:woken, nil)
      timed_out = parked.call(:timed_out, 0.01)
      raised_into = parked.call(:raised_into, nil)
      sleep 0 # each parks
      assert scheduler.wake(fibers[:woken], :value, :blocker)
      raised_into.cancel
      assert_equal :value, woken.wait
      assert_nil timed_out.wait
      assert_nil raised_into.wait
      assert_predicate raised_into, :cancelled?
      fibers.each do |name, fiber|
        refute scheduler.wake(fiber, :late, :blocker), "a wake-up was taken after the wait ended (#{name})"
      end
      assert_equal 7, Weft.spawn { 7 }.wait # the pooled fibers run the next tasks as usual
    end
  end

  # The echo server runs in this process on the reactor; the 10,000 clients run in a child
  # process (each side needs one descriptor per connection, and the hard limit here is 20,000).
  def test_echo_server_holds_ten_thousand_connections
    connections = 10_000
    needed = connections + 200
    soft, hard = Process.getrlimit(:NOFILE)
    skip "needs #{needed} file descriptors per process; the hard limit is #{hard}" if hard < needed
    Process.setrlimit(:NOFILE, [needed, hard].max, hard) if soft < needed

    client_script = <<~RUBY
      require "socket"
      Process.setrlimit(:NOFILE, #{needed}, #{hard})
      port = Integer(ARGV[0])
      sockets = Array.new(#{connections}) { TCPSocket.new("127.0.0.1", port) }
      sockets.each_with_index { |s, i| s.write("ping \#{i}\\n") }
      ok = sockets.each_with_index.count { |s, i| s.gets == "ping \#{i}\\n" }
      puts ok
      STDOUT.flush
      STDIN.read # hold every connection open until the test has counted them
    RUBY

    server = TCPServer.new("127.0.0.1", 0)
    server.listen(4096)
    peak = 0
    open_connections = 0
    echoed = nil
    Weft.run do
      acceptor = Weft.spawn do
        loop do
          client = server.accept
          open_connections += 1
          peak = open_connections if open_connections > peak
          Weft.spawn do
            while (line = client.gets)
              client.write(line)
            end
          ensure
            open_connections -= 1
            client.close
          end
        end
      end
      Open3.popen2(RbConfig.ruby, "-e", client_script, server.addr[1].to_s) do |stdin, stdout, wait|
        echoed = Integer(stdout.gets)
        assert_equal connections, open_connections, "all connections are held at once"
        stdin.close
        wait.value
      end
      acceptor.cancel
    end
    assert_equal connections, echoed
    assert_equal connections, peak
  ensure
    server&.close
  end
end
