# frozen_string_literal: true

require_relative "test_helper"

# The scheduler hooks newer Rubies add, under Weft: each test skips where its hook does not
# exist (CI runs the suite on 3.1 and on 3.3).
class NewerHooksTest < Minitest::Test
  def test_io_select_waits_without_blocking_the_other_tasks
    skip "IO.select reaches the scheduler from Ruby 3.2" if RUBY_VERSION < "3.2"
    pipes = Array.new(10) { IO.pipe }
    results, seconds = timed do
      Weft.run do
        waiting = pipes.map { |reader, _| Weft.spawn { IO.select([reader], nil, nil, 0.5) } }
        ready = Weft.spawn do
          sleep 0.1
          pipes.first.last.write("x")
        end
        ready.wait
        waiting.map(&:wait)
      end
    end
    assert_operator seconds, :<, 2, "ten 0.5 s selects did not overlap"
    assert_equal [pipes.first.first], results.first.first
    assert_equal [nil] * 9, results.drop(1)
  ensure
    pipes&.flatten&.each(&:close)
  end

  # IO#timeout bounds a read as it does without a scheduler: IO::TimeoutError when nothing
  # comes in time (Ruby 3.3 waits with no timeout and then fails with EAGAIN unless the
  # scheduler does the waiting), the data when it comes first, and other tasks run meanwhile.
  def test_io_timeout_raises_io_timeout_error_and_lets_data_through
    skip "IO#timeout exists from Ruby 3.2" unless IO.method_defined?(:timeout)
    pipes = Array.new(10) { IO.pipe }
    pipes.each { |reader, _| reader.timeout = 0.5 }
    results, seconds = timed do
      Weft.run do
        reads = pipes.each_with_index.map do |(reader, _), index|
          Weft.spawn do
            index.even? ? reader.read(1) : reader.gets
          rescue IO::TimeoutError => e
            e
          end
        end
        Weft.spawn do
          sleep 0.1
          pipes.first.last.write("x")
        end.wait
        reads.map(&:wait)
      end
    end
    assert_operator seconds, :<, 2, "ten reads with a 0.5 s IO#timeout did not overlap, or did not end"
    assert_equal "x", results.first
    assert(results.drop(1).all?(IO::TimeoutError), results.inspect)
  ensure
    pipes&.flatten&.each(&:close)
  end

  # A wait with no timeout of its own (IO#wait_readable) ends at the IO's timeout with nil, as
  # without a scheduler.
  def test_wait_readable_ends_at_the_io_timeout
    skip "IO#timeout exists from Ruby 3.2" unless IO.method_defined?(:timeout)
    require "io/wait"
    reader, writer = IO.pipe
    reader.timeout = 0.3
    result, seconds = timed { Weft.run { Weft.timeout(5) { reader.wait_readable } } }
    assert_nil result
    assert_in_delta 0.3, seconds, 0.25
  ensure
    reader&.close
    writer&.close
  end

  # IO#pwrite and #pread from several tasks: each gets its own bytes back, and the process
  # ends. Run in child processes, because the ways this failed were hangs of the whole process:
  # as soon as a pwrite and a pread met (the scheduler's hooks on a helper thread), and at exit,
  # Ruby 3.3.8's timer thread spinning as the VM stopped it (the hooks in a blocking fiber: 10
  # runs of 100 under load, so four children at once). Each child's output is read as it comes,
  # for 20 s at most, and a child not ended by then is killed: one that printed (a warning)
  # and then hung kept this test in a read, past its watchdog, and ended a full run.
  def test_pwrite_and_pread_from_several_tasks
    skip "IO#pread/#pwrite reach the scheduler from Ruby 3.3" if RUBY_VERSION < "3.3"
    script = <<~RUBY
      require "weft"
      require "tempfile"
      file = Tempfile.new("weft-pwrite")
      values = Weft.run do
        Array.new(5) { |i| Weft.spawn { file.pwrite(i.to_s * 10, i * 10); file.pread(10, i * 10) } }.map(&:wait)
      end
      print values.join(",")
    RUBY
    children = Array.new(4) do
      reader, writer = IO.pipe
      pid = Process.spawn(RbConfig.ruby, "-W0", "-I", File.expand_path("../lib", __dir__), "-e", script, out: writer, err: writer)
      writer.close
      [pid, reader]
    end
    deadline = Weft::Timers.now + 20
    outcomes = children.map { |_pid, reader| read_to_end(reader, deadline) }
    expected = Array.new(5) { |i| i.to_s * 10 }.join(",")
    assert_equal [[expected, true]] * 4, outcomes, "each child's output in 20 s, and whether it ended"
  ensure
    children&.each do |pid, reader|
      reader.close
      next if Process.waitpid(pid, Process::WNOHANG)
      Process.kill(:KILL, pid)
      Process.waitpid(pid)
    end
  end

  private

  # @param deadline [Float] a Weft::Timers.now
  # @return [Array(String, Boolean)] what `reader` gave until `deadline`, and whether it came to
  #   its end (the writing process closed it, or ended)
  def read_to_end(reader, deadline)
    output = +""
    loop do
      chunk = reader.read_nonblock(4096, exception: false)
      return [output, true] if chunk.nil?
      next output << chunk if chunk.is_a?(String)
      left = deadline - Weft::Timers.now
      return [output, false] unless left.positive? && reader.wait_readable(left)
    end
  end
end
