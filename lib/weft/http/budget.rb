# frozen_string_literal: true

require "io/wait"
require_relative "../timers"
require_relative "errors"

module Weft
  module HTTP
    # The time one request may spend waiting, and what to raise when it runs out.
    #
    # Every wait of the client (DNS, connect, TLS, each read and write, the pool) asks the
    # budget how long it may last: the timeout of that kind of wait, cut short by the request's
    # total deadline. Waits are IO#wait_readable/#wait_writable with that many seconds, which
    # the fiber scheduler turns into a timer and a plain thread into poll(2): the same code
    # enforces the limits inside and outside a reactor, and nothing waits past the deadline.
    class Budget
      # @return [Float, nil] the monotonic time of the total deadline
      attr_reader :deadline_at

      # @param connect [Numeric, nil] seconds for DNS + TCP connect + TLS handshake
      # @param read [Numeric, nil] seconds for any single read
      # @param write [Numeric, nil] seconds for any single write
      # @param pool [Numeric, nil] seconds to wait for a free pooled connection
      # @param deadline [Numeric, nil] seconds for the whole request, from now
      def initialize(connect: nil, read: nil, write: nil, pool: nil, deadline: nil)
        @limits = { connect: connect, read: read, write: write, pool: pool }
        @deadline = deadline
        @deadline_at = deadline && Timers.now + deadline
        @connect_at = nil
      end

      # Starts the connect clock: DNS, connect and handshake share one connect timeout.
      # @return [self]
      def start_connect
        connect = @limits[:connect]
        @connect_at = connect && Timers.now + connect
        self
      end

      # @param kind [Symbol] :connect, :read, :write or :pool
      # @return [Array(Float or nil, Class)] seconds the wait may last (nil: no limit) and the
      #   exception to raise when it does not end in time
      def limit(kind)
        now = Timers.now
        seconds = kind == :connect ? @connect_at && @connect_at - now : @limits.fetch(kind)
        if @deadline_at && (seconds.nil? || @deadline_at - now <= seconds)
          return [@deadline_at - now, DeadlineExceeded]
        end
        [seconds, ERRORS.fetch(kind)]
      end

      # Waits until `io` is readable (or writable) within the limit for `kind`.
      # @raise [TimeoutError] the subclass for `kind`, or DeadlineExceeded
      def wait(io, kind, writable: kind == :write)
        seconds, error = limit(kind)
        if seconds
          raise error, message(kind, error) if seconds <= 0
          ready = writable ? io.wait_writable(seconds) : io.wait_readable(seconds)
          raise error, message(kind, error) unless ready
        else
          writable ? io.wait_writable : io.wait_readable
        end
        nil
      end

      # Runs the block within the limit for `kind` when it cannot be expressed as an IO wait
      # (getaddrinfo). Inside a reactor a scheduler timer interrupts it; in a plain thread the
      # block gets the seconds to enforce itself (getaddrinfo's own timeout).
      def within(kind)
        seconds, error = limit(kind)
        raise error, message(kind, error) if seconds && seconds <= 0
        return yield(seconds) unless seconds && Weft.running?

        begin
          Timeout.timeout(seconds, Expired) { yield(seconds) }
        rescue Expired
          raise error, message(kind, error)
        end
      end

      # A private signal for #within, so that an enclosing Timeout of the caller's own is never
      # mistaken for ours.
      class Expired < Exception; end # rubocop:disable Lint/InheritException
      private_constant :Expired

      ERRORS = { connect: ConnectTimeout, read: ReadTimeout, write: WriteTimeout, pool: PoolTimeout }.freeze
      private_constant :ERRORS

      private

      def message(kind, error)
        return "deadline of #{@deadline}s exceeded" if error == DeadlineExceeded
        "#{kind} timeout of #{@limits[kind]}s exceeded"
      end
    end
  end
end
