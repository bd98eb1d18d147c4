# frozen_string_literal: true

require "io/wait"
require "timeout"
require_relative "../deadline"
require_relative "errors"

module Weft
  module HTTP
    # The time one request may spend waiting, and what to raise when it runs out.
    #
    # Every wait of the client (DNS, connect, TLS, the pool, each read and write) asks the budget
    # how long it may last: the timeout of that kind of wait, cut short by the limit on the part
    # of the response being read (the whole head, the whole body) and by the total deadline,
    # which is the earlier of the request's own `deadline:` and the caller's
    # (Weft::Deadline.current, set by Weft.deadline around the request or around the task that
    # spawned it). Waits are IO#wait_readable/#wait_writable with that many seconds, which the
    # fiber scheduler turns into a timer and a plain thread into poll(2): the same code enforces
    # the limits inside and outside a reactor, and nothing waits past the deadline. (When the
    # caller's deadline is the one that binds, its own timer ends the wait at the deadline; the
    # client's limit follows GRACE later, as a backstop.)
    class Budget
      # The option behind each kind of limit, and the error raised when it runs out.
      TIMEOUTS = {
        connect: ConnectTimeout, read: ReadTimeout, write: WriteTimeout, acquire: PoolTimeout,
        header: HeaderTimeout, body: BodyTimeout
      }.freeze
      # What the request was doing during each kind of wait, for messages.
      DOING = {
        acquire: "waiting for a free connection", connect: "connecting", write: "sending the request",
        header: "waiting for the response head", body: "reading the response body", read: "reading",
        guards: "waiting for the circuit breaker's rate limit or bulkhead"
      }.freeze
      # Timeout's asynchronous raises (in a plain thread, Weft.deadline is Timeout.timeout): held
      # back until the request waits, where they end the wait, since between waits they could cut
      # the pool's bookkeeping in half; and held back entirely while a connection is handed back.
      # Inside a reactor Weft.deadline and Timeout.timeout raise from the scheduler's timer,
      # at waits, but a Timeout around the whole reactor still raises from its own thread,
      # anywhere: the masks stay there too (0.2 µs and one object each, measured on 3.3).
      ASYNC_TIMEOUTS = [Timeout::Error, (Timeout::ExitException if defined?(Timeout::ExitException))].compact.freeze
      DEFERRED = ASYNC_TIMEOUTS.to_h { |error| [error, :on_blocking] }.freeze
      HELD = ASYNC_TIMEOUTS.to_h { |error| [error, :never] }.freeze
      # Limits that end less than this many seconds apart are taken for the same one (it only
      # decides which limit the error names). A header timeout that defaults to the read timeout
      # starts when the request is sent, the first read wait a moment later: a GC run or YJIT
      # compiling in between made that moment over 1 ms now and then (a CI run on Ruby 3.3
      # named the header timeout for a client given only read_timeout).
      TIE = 0.02
      # How much longer than the caller's deadline a wait lasts, for its timer to end it first.
      GRACE = 0.01
      private_constant :TIMEOUTS, :DOING, :ASYNC_TIMEOUTS, :DEFERRED, :HELD, :TIE, :GRACE

      # Runs the block (handing a connection back to its pool) without letting Timeout's
      # asynchronous raise cut it short; one that arrives meanwhile is raised when it is done.
      # Closing a socket checks for such interrupts, and a raise caught there would be lost.
      def self.uninterrupted(&block)
        Thread.handle_interrupt(HELD, &block)
      end

      # @return [Deadline, nil] the total deadline: the earlier of the request's and the caller's
      attr_reader :deadline

      # The seconds each kind of wait may last (nil: no limit), for #initialize: connect (DNS +
      # TCP connect + TLS handshake), read (any single read), write (any single write), acquire
      # (waiting for a free pooled connection), header (from sending a request to having its
      # response head), body (from the response head to the end of the body).
      # @return [Hash{Symbol => Numeric, nil}] frozen
      def self.limits(connect: nil, read: nil, write: nil, acquire: nil, header: nil, body: nil)
        { connect: connect, read: read, write: write, acquire: acquire, header: header, body: body }.freeze
      end

      # @param limits [Hash] from Budget.limits: a client makes it once and gives it to every
      #   request that does not override a timeout
      # @param deadline [Numeric, nil] seconds for the whole request, from now
      def initialize(limits, deadline = nil)
        @timeouts = limits
        own = deadline && Deadline.after(deadline)
        @deadline = Deadline.earliest(own, Deadline.current)
        @callers_deadline = !@deadline.nil? && !@deadline.equal?(own)
        @connect = nil # the connect clock
        @part = nil # :header or :body while a response is read
        @part_deadline = nil
        @doing = :acquire
        @binding = nil
      end

      # Starts the clock of a limit on several waits together: :connect (DNS, connect and the
      # handshake share one connect timeout), :header (from the request sent to its response
      # head) or :body (from the head to the end of the body).
      # @return [self]
      def start(clock)
        seconds = @timeouts.fetch(clock)
        deadline = seconds && Deadline.after(seconds)
        if clock == :connect
          @connect = deadline
        else
          @part = clock
          @part_deadline = deadline
        end
        self
      end

      # @param kind [Symbol] :connect, :read, :write or :acquire
      # @return [Array(Float or nil, Class)] seconds the wait may last (nil: no limit) and the
      #   exception to raise when it does not end in time
      def limit(kind)
        [seconds_for(kind), @binding]
      end

      # Waits until `io` is readable (or writable) within the limit for `kind`.
      # @raise [TimeoutError] the error of the limit that ran out
      def wait(io, kind, writable: kind == :write)
        seconds = seconds_for(kind)
        if seconds
          raise exceeded(@binding) if seconds <= 0
          ready = writable ? io.wait_writable(seconds) : io.wait_readable(seconds)
          raise exceeded(@binding) unless ready
        else
          writable ? io.wait_writable : io.wait_readable
        end
        nil
      end

      # @return [#wait] a waiter for Weft::Stream that counts every wait as one of `kind`,
      #   whatever the stream does (a CONNECT tunnel's writes and reads are part of connecting)
      def as(kind)
        Phase.new(self, kind)
      end

      # The budget seen through one kind of wait (see #as).
      Phase = Struct.new(:budget, :kind) do
        # Weft::Stream's waiter interface.
        def wait(io, _operation, writable:)
          budget.wait(io, kind, writable: writable)
        end
      end

      # Runs the block within the limit for `kind` when it cannot be expressed as an IO wait
      # (getaddrinfo). Inside a reactor a scheduler timer interrupts it; in a plain thread the
      # block gets the seconds to enforce itself (Connector#resolve_within).
      def within(kind)
        seconds, error = limit(kind)
        raise exceeded(error) if seconds && seconds <= 0
        return yield(seconds) unless seconds && Weft.running?

        begin
          Timeout.timeout(seconds, Expired) { yield(seconds) }
        rescue Expired
          raise exceeded(error)
        end
      end

      # Runs one step of the request (the exchange up to the response head, or one read of the
      # body). The caller's deadline can also arrive from outside: as Weft::DeadlineExceeded
      # raised by the task's timer (or by Timeout in a plain thread) wherever the step waits. That
      # becomes the client's DeadlineExceeded, which says what the request was doing; every other
      # exception passes unchanged.
      # @param defer [Boolean] hold Timeout's asynchronous raises back until the step waits
      # @param phase [Symbol, nil] what the request does until its first wait of its own (a key
      #   of DOING): :guards around a circuit breaker, whose rate limit and bulkhead wait before
      #   the request asks for a connection
      def enforce(defer: false, phase: nil)
        return Thread.handle_interrupt(DEFERRED) { enforce(phase: phase) { yield } } if defer

        @doing = phase if phase
        begin
          yield
        rescue Weft::DeadlineExceeded => e
          raise if e.is_a?(Error)
          raise DeadlineExceeded, "#{e.message} (the caller's Weft.deadline) #{doing}"
        end
      end

      # @param error [Class] one of the client's timeouts
      # @param detail [String, nil] appended to the message
      # @return [Exception] the error to raise, with a message saying which limit ran out and
      #   what the request was doing
      def exceeded(error, detail = nil)
        limit =
          if error == DeadlineExceeded
            @callers_deadline ? "#{@deadline.message} (the caller's Weft.deadline)" : "request #{@deadline.message}"
          else
            name = TIMEOUTS.key(error)
            "#{name} timeout of #{@timeouts[name]}s exceeded"
          end
        error.new("#{limit} #{doing}#{" (#{detail})" if detail}")
      end

      # A private signal for #within, so that an enclosing Timeout of the caller's own is never
      # mistaken for ours.
      class Expired < Exception; end # rubocop:disable Lint/InheritException
      private_constant :Expired

      private

      # How long a wait of `kind` may last; the error for the limit that binds it is left in
      # @binding (no Array per wait: a large download waits thousands of times).
      # @return [Float, nil]
      def seconds_for(kind)
        @doing = kind == :read && @part ? @part : kind
        if kind == :connect
          seconds = @connect&.remaining
          @binding = ConnectTimeout
        else
          seconds = @timeouts.fetch(kind)
          @binding = TIMEOUTS.fetch(kind)
        end
        if @part_deadline && kind == :read
          left = @part_deadline.remaining
          if seconds.nil? || left < seconds
            # Within TIE the two are one limit (a header timeout that defaults to the read
            # timeout, on the first wait): the error names the read timeout.
            @binding = TIMEOUTS.fetch(@part) unless seconds && seconds - left < TIE
            seconds = left
          end
        end
        if @deadline
          left = @deadline.remaining
          if seconds.nil? || left <= seconds
            @binding = DeadlineExceeded
            # The caller's deadline has a timer of its own (Weft.deadline's, or the task's) that
            # raises into this very wait when it passes. Waiting a moment longer lets that timer
            # end it, so the request always ends the same way, with one error; the client's
            # own limit is there for a deadline no timer watches any more.
            seconds = @callers_deadline && left.positive? ? left + GRACE : left
          end
        end
        seconds
      end

      def doing
        "while #{DOING.fetch(@doing)}"
      end
    end
  end
end
