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

  # IO#pwrite and #pread from several tasks: each gets its own bytes back. Run in a child
  # process, because the way this once failed was a hang of the whole process.
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
    output = IO.popen([RbConfig.ruby, "-I", File.expand_path("../lib", __dir__), "-e", script], err: %i[child out]) do |child|
      if child.wait_readable(20)
        child.read
      else
        Process.kill(:KILL, child.pid)
        flunk "pwrite/pread under Weft hung for 20 s"
      end
    end
    assert_equal Array.new(5) { |i| i.to_s * 10 }.join(","), output
  end
end
