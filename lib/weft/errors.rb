# frozen_string_literal: true

require "timeout"

module Weft
  # The base of every error Weft raises on its own account.
  class Error < StandardError; end

  # Raised inside a task when it is cancelled (see Task#cancel), at the point where it was
  # suspended. It inherits from Exception, not StandardError, so that an ordinary
  # `rescue => e` in application code does not swallow a cancellation; `ensure` blocks run.
  class Cancelled < Exception; end # rubocop:disable Lint/InheritException

  # Raised by Weft.timeout (and by the stdlib Timeout.timeout under Weft's scheduler) when the
  # deadline passes. It is a Timeout::Error so existing `rescue Timeout::Error` code keeps working.
  class TimeoutError < Timeout::Error; end

  # Raised where a task waits when the deadline set by Weft.deadline (around it or around the task
  # that spawned it) passes. Every wait inside Weft is bounded by that deadline and ends in this
  # error, so `rescue Weft::TimeoutError` (or Timeout::Error) catches both kinds of expiry.
  class DeadlineExceeded < TimeoutError; end
end
