# frozen_string_literal: true

require "io/wait"
require "timeout"
require "pg"
require_relative "errors"
require_relative "request"
require_relative "../timers"

module Weft
  module Postgres
    # Drives one shared connection in libpq pipeline mode.
    #
    # Callers #submit a statement (buffered by libpq and flushed at once, without waiting for
    # earlier answers) and then #await its outcome. Every statement is followed by its own sync
    # point, so each runs in its own implicit transaction and an error aborts the pipeline only
    # up to that sync: the failing statement's caller gets the error, the next statement runs
    # normally.
    #
    # There is no background reader. Whichever waiter finds nobody reading becomes the reader:
    # it reads results in order, settles each request at its sync point and wakes that request's
    # waiter, and when its own request is settled (or it is cancelled) it hands the role to the
    # next waiter. A connection nobody waits on is not read at all, so a pool never keeps a
    # reactor alive.
    #
    # Everything here runs under the pool's lock; the lock is released only while waiting on
    # the socket or on a condition variable.
    class Pipeline
      # Seconds a cancelled statement may take to come back after the server was asked to
      # cancel it; past that the connection is given up.
      CANCEL_GRACE = 2.0
      # libpq 17 can mark a sync point without flushing; older libpq flushes with it (which,
      # on a nonblocking connection, never waits).
      SEND_SYNC = PG::Connection.method_defined?(:send_pipeline_sync) ? :send_pipeline_sync : :sync_pipeline_sync

      # @return [Connection]
      attr_reader :connection

      # @param connection [Connection] in pipeline mode
      # @param lock [Thread::Mutex] the pool's lock
      # @param owner [#pipeline_drained, #slot_freed, #connection_lost] the pool
      # @param address [String] the server, for messages
      def initialize(connection, lock, owner, address)
        @connection = connection
        @raw = connection.raw
        @lock = lock
        @owner = owner
        @address = address
        @queue = []    # requests sent and not yet settled, in send order
        @waiters = []  # condition variables of the callers waiting here, in arrival order
        @reader = nil  # the condition variable of the waiter currently reading
        @fenced = false
        @draining = false
        @flush_scheduled = false
      end

      # @return [Integer] statements in flight
      def depth
        @queue.size
      end

      # @return [Boolean] no new statements may be sent (a cancellation is settling)
      def fenced?
        @fenced
      end

      # Set by the pool when a caller waits to pin this connection: no new statements are
      # added, so the pipeline empties and the connection can be handed over.
      attr_accessor :draining

      # @return [Boolean]
      def draining?
        @draining
      end

      # @return [Boolean] whether someone is reading results
      def reading?
        !@reader.nil?
      end

      # How long the statement at the head has been running, in seconds (0 when empty). A
      # pipeline whose head runs long holds up everything behind it; the pool avoids it.
      def head_age(now = Timers.now)
        head = @queue.first
        head ? now - head.sent_at : 0.0
      end

      # Hands a statement to libpq with its own sync point and tries to send it at once.
      # @raise [PG::Error] when libpq refuses it (nothing is queued then)
      def submit(request)
        @raw.send_query_params(request.sql, request.params)
        @raw.__send__(SEND_SYNC)
        request.sent_at = Timers.now
        @queue << request
        schedule_flush
      rescue PG::Error, IOError, SystemCallError => e
        raise e unless @raw.status != PG::CONNECTION_OK || @queue.include?(request)
        lost(e)
        raise ConnectionError, lost_message(e)
      end

      # Waits for a submitted request and returns its result. If the caller is interrupted
      # (cancelled, timed out) the request is abandoned: its result is discarded when it
      # arrives, and if it is the only statement in flight the server is asked to cancel it.
      # @return [PG::Result]
      def await(request)
        wait_for(request.condition) { request.settled? }
        request.value
      ensure
        abandon(request) unless request.settled?
      end

      # Waits until nothing is in flight (reading results itself if nobody else does).
      # @return [void]
      def await_empty
        wait_for(Thread::ConditionVariable.new) { @queue.empty? }
      end

      private

      # Under Weft, statements submitted during one turn of the reactor go out together: the
      # first schedules a flush for the end of the turn (a timer callback in the loop fiber,
      # which never waits), so many fibers' statements cost one write. Elsewhere (plain
      # threads) each submit flushes at once.
      def schedule_flush
        return if @flush_scheduled
        scheduler = Weft.scheduler
        if scheduler && scheduler.thread.equal?(Thread.current)
          @flush_scheduled = true
          scheduler.timers.after(0) { deferred_flush }
        else
          @raw.flush
        end
      end

      def deferred_flush
        return unless @lock.try_lock # a thread holds it: the reader flushes on its next turn
        begin
          @flush_scheduled = false
          @raw.flush unless @raw.finished?
        rescue PG::Error, IOError, SystemCallError
          nil # the reader meets the same failure and fails the statements in flight
        ensure
          @lock.unlock
        end
      end

      def wait_for(condition)
        @waiters << condition
        until yield
          if @reader
            condition.wait(@lock)
          else
            lead(condition) { yield }
          end
        end
      ensure
        @waiters.delete(condition)
        # Pass the reader role on. The waiter a leaving reader signalled may have been settled
        # in the same batch and be leaving too; then it passes the role on here, and so on.
        @waiters.first&.signal unless @reader
      end

      # Reads results until the block is true, as the connection's reader.
      def lead(condition)
        @reader = condition
        until yield
          @flush_scheduled = false
          events = @raw.flush ? IO::READABLE : IO::READABLE | IO::WRITABLE
          settle_ready
          break if yield
          wait_socket(events)
          @raw.consume_input
        end
      rescue PG::Error, IOError, SystemCallError => e
        lost(e)
      ensure
        @reader = nil
        successor = @waiters.find { |waiter| !waiter.equal?(condition) }
        successor&.signal
      end

      def wait_socket(events)
        io = @raw.socket_io
        @lock.unlock
        begin
          io.wait(events)
        ensure
          @lock.lock
        end
      end

      # Takes every result libpq has complete without waiting and settles finished requests.
      def settle_ready
        while (request = @queue.first) && !@raw.is_busy
          result = @raw.sync_get_result
          if result.nil?
            next # end of this statement's results; its sync point follows
          elsif result.result_status == PG::PGRES_PIPELINE_SYNC
            @queue.shift
            finish(request)
          else
            request.result ? result.clear : request.result = result
            raise PG::ConnectionBad, result.error_message if @raw.status != PG::CONNECTION_OK
          end
        end
      end

      def finish(request)
        result = request.result
        if request.abandoned?
          result&.clear
          request.settle
        elsif result.nil?
          request.settle(Error.new("PostgreSQL returned no result for: #{request.sql}"))
        else
          begin
            result.check
            request.settle
          rescue PG::Error => e
            request.settle(e)
          end
        end
        @owner.slot_freed(self)
        @owner.pipeline_drained(self) if @queue.empty?
      end

      # The connection failed: every request in flight fails (with the server's own error when
      # one arrived first, e.g. "terminating connection due to administrator command").
      def lost(error)
        @connection.broken!
        failed = @queue
        @queue = []
        message = lost_message(error)
        failed.each do |request|
          server_error = begin
            request.result&.check
            nil
          rescue PG::Error => e
            e
          end
          request.settle(server_error || ConnectionError.new(message))
        end
        @waiters.each(&:signal)
        @owner.connection_lost(self)
      end

      def lost_message(error)
        "connection to PostgreSQL at #{@address} lost with statements in flight: " \
          "#{error.message.strip} (#{error.class})"
      end

      # Called as an interrupted waiter leaves. Asking the server to cancel "whatever runs now"
      # is safe only when nothing else is queued behind this statement (otherwise the cancel
      # could land on the next caller's statement), so then it is done and the pipeline is
      # fenced until the statement comes back; otherwise the result is just discarded.
      def abandon(request)
        request.abandon
        return unless @queue.size == 1 && @queue.first.equal?(request) && !@fenced
        @fenced = true
        begin
          @lock.unlock
          begin
            @raw.cancel
          ensure
            @lock.lock
          end
          Timeout.timeout(CANCEL_GRACE) { wait_for(request.condition) { request.settled? } }
        rescue Timeout::Error, PG::Error, IOError, SystemCallError => e
          lost(e) unless request.settled?
        ensure
          @fenced = false
          @owner.slot_freed(self)
        end
      end
    end
  end
end
