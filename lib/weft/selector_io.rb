# frozen_string_literal: true

require "io/event"

module Weft
  # The Fiber::Scheduler hooks io_read and io_write, for a reactor whose selector does the reads
  # and writes itself: io-event's io_uring selector submits them to the kernel with no readiness
  # round trip. Scheduler#initialize extends a reactor with them only then.
  #
  # With epoll (or kqueue), the selector's io_read is what Ruby does without the hook: read(2),
  # and on EAGAIN a wait for readiness (Scheduler#io_wait), then read(2) again. The hook only
  # adds to it: Ruby wraps the IO's buffer in an IO::Buffer object for every call, and calls a
  # Ruby method that reads IO#timeout. In bench/core's echo rows (Ruby 3.3 + YJIT, epoll) that
  # was one object per round trip (5.2 -> 4.1 in all) and, with 10,000 connections, where each
  # minor GC marks 10,000 fiber stacks (~25 ms), a third of the GCs: the server's CPU per round
  # trip went from 19.3-20.0 us to 15.2-16.0 without the hooks (async 2.46, which defines them:
  # 18.6-19.6). IO#timeout needs no hook either: Ruby passes it to Scheduler#io_wait, and raises
  # IO::TimeoutError itself when the wait times out.
  module SelectorIO
    # @param selector [Object] the reactor's io-event selector
    # @return [Boolean] whether the hooks save anything with `selector`
    def self.worthwhile?(selector)
      IO::Event::Support.buffer? && defined?(IO::Event::Selector::URing) && selector.is_a?(IO::Event::Selector::URing) ? true : false
    end

    if IO.method_defined?(:timeout)
      # IO#read and friends (Ruby 3.2+: within IO#timeout, raising IO::TimeoutError like Ruby
      # does without Weft).
      def io_read(io, buffer, length, offset = 0)
        timeout = io.timeout
        return @selector.io_read(Fiber.current, io, buffer, length, offset) unless timeout
        timeout_after(timeout, ::IO::TimeoutError, "Blocking operation timed out!") do
          read_within_timeout(io, buffer, length, offset)
        end
      end

      # IO#write and friends (Ruby 3.2+: within IO#timeout).
      def io_write(io, buffer, length, offset = 0)
        timeout = io.timeout
        return @selector.io_write(Fiber.current, io, buffer, length, offset) unless timeout
        timeout_after(timeout, ::IO::TimeoutError, "Blocking operation timed out!") do
          @selector.io_write(Fiber.current, io, buffer, length, offset)
        end
      end
    else
      # IO#read and friends.
      def io_read(io, buffer, length, offset = 0)
        @selector.io_read(Fiber.current, io, buffer, length, offset)
      end

      # IO#write and friends.
      def io_write(io, buffer, length, offset = 0)
        @selector.io_write(Fiber.current, io, buffer, length, offset)
      end
    end

    private

    # Ruby 3.3 asks for a read of at least 0 bytes (whatever is there) and, when nothing is,
    # waits by itself, with no timeout, and then fails with EAGAIN rather than IO::TimeoutError.
    # So the waiting is done here, inside the IO's timeout, until something (or the end) comes.
    def read_within_timeout(io, buffer, length, offset)
      fiber = Fiber.current
      loop do
        result = @selector.io_read(fiber, io, buffer, length, offset)
        return result unless length.zero? && result == -Errno::EAGAIN::Errno

        @selector.io_wait(fiber, io, ::IO::READABLE)
      end
    end
  end
end
