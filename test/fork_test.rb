# frozen_string_literal: true

require_relative "test_helper"
require "open3"
require "rbconfig"

# fork inside a reactor: the child starts clean (no scheduler, only the fiber that forked) and
# can run a reactor of its own; the parent's reactor never notices.
class ForkTest < Minitest::Test
  LIB = File.expand_path("../lib", __dir__)

  def test_a_child_forked_in_a_task_exits_cleanly
    status = Weft.run do
      pid = fork {} # the child's exit runs no reactor of the parent's
      Process.wait(pid)
      $?
    end
    assert_predicate status, :success?
  end

  # In a script of its own, like the tests below that fork without a block: were the child to
  # run the parent's reactor, it would go on with the parent's code, here the test runner.
  # In the child, another thread's reactor is a copy nothing runs: closing an IO that one of
  # its tasks waited on in the parent closes it (it waited forever for that reactor to take
  # the close: "No live threads left"), and the parent's task still reads.
  def test_a_child_closes_an_io_a_copied_reactor_of_another_thread_waited_on
    reader, writer = IO.pipe
    parent_reactor = Thread.new { Weft.run { reader.read(1) } }
    100.times { Weft::Scheduler.waiting_elsewhere(reader, nil) ? break : sleep(0.01) }
    pid = fork { reader.close; exit!(reader.closed? ? 0 : 1) }
    _, status = Process.wait2(pid)
    assert status.success?, "the child closed the IO and exited (#{status.inspect})"
    writer.write("x")
    assert parent_reactor.join(5)
    assert_equal "x", parent_reactor.value
  ensure
    parent_reactor&.kill
    [reader, writer].each { |io| io&.close }
  end

  def test_a_child_runs_a_reactor_of_its_own_while_the_parents_goes_on
    out, err, status = run_script(<<~'RUBY')
      require "weft"
      from_child, to_parent = IO.pipe
      parent_in, parent_out = IO.pipe
      ticks = 0
      result = Weft.run do
        # Registered in the parent's epoll while the child runs its reactor and exits.
        reader = Weft.spawn { parent_in.read(5) }
        ticker = Weft.spawn { loop { sleep 0.02; ticks += 1 } }
        pid = fork do
          answer = Weft.run do
            sleepers = Array.new(5) { |i| Weft.spawn { sleep 0.2; i } }
            inner_in, inner_out = IO.pipe
            Weft.spawn { inner_out.write("ping"); inner_out.close }
            [Weft.gather(sleepers), inner_in.read]
          end
          to_parent.write(answer.inspect)
        end
        to_parent.close
        answer = from_child.read
        Process.wait(pid)
        parent_out.write("after")
        ticker.cancel
        [answer, $?.success?, reader.wait, ticks >= 5]
      end
      p result
    RUBY
    assert status.success?, err
    assert_equal '["[[0, 1, 2, 3, 4], \"ping\"]", true, "after", true]', out.chomp
  end

  def test_io_popen_dash_in_a_task_gives_the_child_a_clean_start_too
    output, status = Weft.run do
      read = IO.popen("-") do |io|
        if io
          io.read
        else
          sleep 0.01 # blocking, with no reactor
          print "child's scheduler: #{Fiber.scheduler.inspect}"
        end
      end
      [read, $?]
    end
    assert_equal "child's scheduler: nil", output
    assert_predicate status, :success?
  end

  # Without a block, the child goes on with the task that forked, without a reactor, and ends
  # with it: nothing after Weft.run runs twice, and a failure is the child's exit status.
  FORK_WITHOUT_BLOCK = <<~'RUBY'
    require "weft"
    main = Process.pid
    Weft.run do
      ticker = Weft.spawn { 3.times { sleep 0.02 } }
      if (pid = fork)
        Process.wait(pid)
        puts "parent saw #{$?.exitstatus}"
        ticker.wait
      else
        sleep 0.05 # blocking: the child has no scheduler
        puts "child alone, scheduler #{Fiber.scheduler.inspect}"
        raise "the child's task failed" if ARGV[0] == "fail"
      end
    end
    puts "after run in #{Process.pid == main ? 'parent' : 'child'}"
  RUBY

  def test_fork_without_a_block_the_child_ends_when_its_task_ends
    out, err, status = run_script(FORK_WITHOUT_BLOCK)
    assert status.success?, err
    assert_equal ["child alone, scheduler nil", "parent saw 0", "after run in parent"], out.lines(chomp: true)

    out, err, = run_script(FORK_WITHOUT_BLOCK, "fail")
    assert_equal ["child alone, scheduler nil", "parent saw 1", "after run in parent"], out.lines(chomp: true)
    assert_match(/the child's task failed/, err)
  end

  def test_fork_from_the_loop_fiber_of_a_scheduler_set_by_hand
    out, err, status = run_script(<<~'RUBY')
      require "weft"
      main = Process.pid
      Fiber.set_scheduler(Weft::Scheduler.new)
      Fiber.schedule { sleep 0.05; puts "task in #{Process.pid == main ? 'parent' : 'child'}" }
      pid = fork { puts "child" }
      Process.wait(pid)
    RUBY
    assert status.success?, err
    # The scheduled task runs once, in the parent, when its scheduler closes.
    assert_equal ["child", "task in parent"], out.lines(chomp: true)
  end

  def test_a_child_holds_no_copy_of_the_parents_pidfds
    skip "pidfds are Linux-only" unless File.directory?("/proc/self/fd")
    reader, writer = IO.pipe
    Weft.run do
      sleeper = fork { sleep 0.3 }
      waiter = Weft.spawn { Process.wait(sleeper) } # io-event holds a pidfd for it now
      sleep 0.01
      pid = fork do
        pidfds = Dir.children("/proc/self/fd").count do |fd|
          File.readlink("/proc/self/fd/#{fd}").include?("pidfd")
        rescue SystemCallError
          false
        end
        writer.write(pidfds.to_s)
      end
      writer.close
      Process.wait(pid)
      waiter.wait
    end
    assert_equal "0", reader.read
  ensure
    reader&.close
    writer&.close unless writer&.closed?
  end

  # A child that keeps a copy of a pidfd (one forked by code that bypasses Process._fork, say)
  # keeps the parent's epoll registration for it alive; its event then reaches the next wait
  # that gets the same descriptor number. That wait must still return the right status.
  def test_a_wait_woken_by_a_stale_pidfd_event_still_returns_the_status
    skip "pidfds are Linux-only" unless File.directory?("/proc/self/fd")
    out, err, status = run_script(<<~'RUBY')
      require "weft"
      raw_fork = Process.method(:_fork).super_method # Ruby's own, without Weft's child cleanup
      result = Weft.run do
        first = fork { sleep 0.1 }
        waiter = Weft.spawn { Process.wait(first) }
        sleep 0.01
        holder = raw_fork.call
        if holder.zero?
          Weft.scheduler.process_fork # leave the reactor copy, keep the pidfd copies
          sleep 1
          exit!(0)
        end
        waiter.wait
        second = fork { sleep 0.2 }
        waited = Process.wait(second)
        status = $?
        Process.wait(holder)
        [waited == second, status.success?]
      end
      p result
    RUBY
    assert status.success?, err
    assert_equal "[true, true]", out.chomp
  end

  private

  def run_script(source, *args)
    Open3.capture3(RbConfig.ruby, "-I", LIB, "-e", source, *args)
  end
end
