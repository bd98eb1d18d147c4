# frozen_string_literal: true

require_relative "test_helper"
require "socket"

# Which reactors take IO#read and IO#write through io_read/io_write (Weft::SelectorIO), and that
# reads and writes without those hooks still park only their fiber and honour IO#timeout.
class SelectorIOTest < Minitest::Test
  def test_an_epoll_or_kqueue_reactor_leaves_reads_and_writes_to_ruby
    selector_class = Weft.run { Fiber.scheduler.instance_variable_get(:@selector).class }
    skip "io-event chose #{selector_class}" if defined?(IO::Event::Selector::URing) && selector_class <= IO::Event::Selector::URing
    refute Weft::SelectorIO.worthwhile?(selector_class.allocate)
    refute Weft.run { Fiber.scheduler.respond_to?(:io_read) || Fiber.scheduler.respond_to?(:io_write) }
  end

  # Ruby reads by itself and waits through Scheduler#io_wait: two connections that each wait for
  # a line overlap, and a peer's line wakes only its reader.
  def test_reads_wait_in_the_reactor_without_blocking_other_tasks
    pairs = Array.new(2) { UNIXSocket.pair }
    lines = Weft.run do
      readers = pairs.map { |ours, _| Weft.spawn { ours.gets } }
      Weft.spawn do
        sleep 0.02
        pairs[1][1].write("second\n")
        sleep 0.02
        pairs[0][1].write("first\n")
      end
      readers.map(&:wait)
    end
    assert_equal ["first\n", "second\n"], lines
  ensure
    pairs&.flatten&.each(&:close)
  end

  # A write that cannot go out (nobody reads, the socket buffer is full) ends at IO#timeout with
  # IO::TimeoutError, as without a scheduler, while the reactor keeps serving other tasks.
  def test_a_stuck_write_raises_io_timeout_error_at_the_io_timeout
    skip "IO#timeout exists from Ruby 3.2" unless IO.method_defined?(:timeout)
    ours, theirs = UNIXSocket.pair
    ours.timeout = 0.1
    ticks = 0
    error, seconds = Weft.run do
      ticker = Weft.spawn { loop { sleep 0.01; ticks += 1 } }
      started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      begin
        ours.write("x" * 8_000_000)
        nil
      rescue IO::TimeoutError => e
        [e, Process.clock_gettime(Process::CLOCK_MONOTONIC) - started]
      ensure
        ticker.cancel
      end
    end
    assert_kind_of IO::TimeoutError, error
    assert_operator seconds, :>=, 0.1
    assert_operator seconds, :<, 2
    assert_operator ticks, :>=, 3
  ensure
    ours&.close
    theirs&.close
  end
end
