# frozen_string_literal: true

require "timeout"

module Weft
  # Included by every error Weft raises, so `rescue Weft::Error` catches them all: the core's,
  # the server's, the PostgreSQL pool's, the HTTP client's and the resilience guards'.
  #
  # A module rather than a base class because the family cannot share one superclass: the
  # timeouts must stay Timeout::Errors (code written for Net::HTTP, Faraday or Rack::Timeout
  # rescues Timeout::Error), the PostgreSQL connection error a PG::ConnectionBad, configuration
  # errors ArgumentErrors, and the rest StandardErrors. Each class keeps the superclass its
  # callers expect and includes this module.
  #
  # Weft::Cancelled does not include it, on purpose: see there.
  module Error; end

  # Raised when Weft is used in a way or at a moment it does not allow: outside a reactor, a task
  # waiting for itself, settling a promise twice, releasing what was not acquired, using a
  # closed client.
  class UsageError < StandardError
    include Error
  end

  # Raised inside a task when it is cancelled (see Task#cancel), at the point where it was
  # suspended. It inherits from Exception, not StandardError, so that an ordinary
  # `rescue => e` in application code does not swallow a cancellation; `ensure` blocks run.
  # For the same reason it is not a Weft::Error: `rescue Weft::Error` means "a Weft operation
  # failed", and a task that caught its own cancellation there would go on running.
  class Cancelled < Exception; end # rubocop:disable Lint/InheritException

  # Raised by Weft::Stream when the connection breaks under it: the peer closed it (end of stream
  # where more was needed), reset it, stopped reading (a broken pipe), or the TLS layer failed.
  # Whatever the errno or OpenSSL exception, it is this one class, so code above the stream
  # rescues one thing; the original exception is the `cause`. The server knows it as
  # Weft::Server::Connection::ClientGone.
  class ConnectionLost < StandardError
    include Error
  end

  # Raised by Weft::Stream when a read, write or TLS handshake waited longer than its timeout
  # (or past its deadline) for the peer. Not a Timeout::Error: a peer too slow is a fault of the
  # peer, reported to the code that talks to it, not a deadline of the caller's. The server
  # knows it as Weft::Server::Connection::ClientTimeout.
  class ConnectionStalled < StandardError
    include Error
  end

  # Raised by Weft.timeout when the deadline passes (the stdlib's Timeout.timeout, which Weft's
  # scheduler also serves, raises the class it is given, Timeout::Error by default). It is a
  # Timeout::Error so existing `rescue Timeout::Error` code keeps working.
  class TimeoutError < Timeout::Error
    include Error
  end

  # Raised where a task waits when the deadline set by Weft.deadline (around it or around the task
  # that spawned it) passes. Every wait inside Weft is bounded by that deadline and ends in this
  # error, so `rescue Weft::TimeoutError` (or Timeout::Error) catches both kinds of expiry.
  class DeadlineExceeded < TimeoutError; end
end
