# frozen_string_literal: true

require "io/wait"
require "socket"
require "pg"
require_relative "errors"
require_relative "request"
require_relative "background"
require_relative "../timers"
require_relative "../deadline"

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
    # A caller that leaves before its statement is settled (its deadline passed, its task was
    # cancelled) abandons it: the result is thrown away when it arrives, and once the statement
    # is the one the server executes (the head of the queue) the server is asked to cancel it,
    # off the caller's path (see #cancel_abandoned). PostgreSQL cancels whatever the connection
    # runs when the request lands, which may already be the next caller's statement; so every
    # statement in flight meanwhile is marked exposed, and an exposed statement that comes back
    # cancelled is sent again instead of failing (its implicit transaction was rolled back, so
    # it runs once in effect). PostgreSQL drops a cancel request that lands between statements
    # (it clears a pending cancel before each protocol message), so statements sent after the
    # request was delivered are safe.
    #
    # Everything here runs under the pool's lock; the lock is released only while waiting on
    # the socket or on a condition variable.
    class Pipeline
      # Seconds a cancelled statement may take to come back after the server was asked to
      # cancel it; past that the connection is given up.
      CANCEL_GRACE = 2.0
      # Seconds after which a cancel request that had no effect is sent again: PostgreSQL drops
      # one that lands between two protocol messages of the statement (Parse, Bind, Execute).
      CANCEL_REPEAT = 0.5
      # SQLSTATE query_canceled: a cancel request (or statement_timeout) ended the statement.
      QUERY_CANCELED = "57014"
      # libpq 17 can mark a sync point without flushing; older libpq flushes with it (which,
      # on a nonblocking connection, never waits).
      SEND_SYNC = PG::Connection.method_defined?(:send_pipeline_sync) ? :send_pipeline_sync : :sync_pipeline_sync

      # @return [Connection]
      attr_reader :connection

      # @param connection [Connection] in pipeline mode
      # @param lock [Thread::Mutex] the pool's lock
      # @param owner [#pipeline_drained, #pipeline_reopened, #slot_freed, #connection_lost, #unlocked]
      #   the pool
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
        @cancelling = false # a cancel request is on its way to the server: send nothing new
        @tidying = false    # a background task is cancelling abandoned statements
        @draining = false
        @flush_scheduled = false
      end

      # @return [Integer] statements in flight
      def depth
        @queue.size
      end

      # @return [Boolean] no new statements may be sent (a cancel request is on its way)
      def fenced?
        @cancelling
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
      # (its deadline passed, it was cancelled or timed out) the request is abandoned: its
      # result is discarded when it arrives, and the server is asked to cancel it once it is
      # the statement running, without the caller waiting for that.
      # @return [PG::Result]
      def await(request)
        wait_for(request.condition) { request.settled? }
        request.value
      ensure
        abandon(request) unless request.settled?
      end

      # Waits until nothing is in flight and no cancel request is on its way, so the connection
      # can leave pipeline mode (reading results itself if nobody else does).
      # @param deadline [Deadline, nil] when to give up
      # @return [Boolean] false if the deadline passed first
      def await_empty(deadline = nil)
        wait_for(Thread::ConditionVariable.new, deadline) { idle? }
      end

      private

      def idle?
        @queue.empty? && !@cancelling
      end

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

      # Waits until the block is true, reading results meanwhile if nobody else is.
      # @param deadline [Deadline, nil] when to give up
      # @return [Boolean] false if the deadline passed first
      def wait_for(condition, deadline = nil)
        @waiters << condition
        until yield
          return false if deadline&.expired?
          # With nothing in flight there is nothing to read: a cancel request is under way, and
          # its end wakes every waiter.
          if @reader || @queue.empty?
            condition.wait(@lock, deadline&.remaining)
          else
            lead(condition, deadline) { yield }
          end
        end
        true
      ensure
        @waiters.delete(condition)
        # Pass the reader role on. The waiter a leaving reader signalled may have been settled
        # in the same batch and be leaving too; then it passes the role on here, and so on.
        @waiters.first&.signal unless @reader
      end

      # Reads results until the block is true (or the deadline passes), as the connection's
      # reader.
      def lead(condition, deadline)
        @reader = condition
        until yield
          @flush_scheduled = false
          events = @raw.flush ? IO::READABLE : IO::READABLE | IO::WRITABLE
          settle_ready
          # Nothing in flight: nothing to read (the caller waits for a cancel request instead).
          break if yield || @queue.empty? || deadline&.expired?
          wait_socket(events, deadline&.remaining)
          @raw.consume_input
        end
      rescue PG::Error, IOError, SystemCallError => e
        lost(e)
      ensure
        @reader = nil
        @owner.connection_lost(self) if @connection.broken? # see #lost
        successor = @waiters.find { |waiter| !waiter.equal?(condition) }
        successor&.signal
      end

      def wait_socket(events, timeout)
        io = @raw.socket_io
        @owner.unlocked { io.wait(events, timeout) }
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

      # A request reached its sync point: hand its outcome to its caller (or send it again if a
      # cancel request meant for another statement ended it), then see to what follows.
      def finish(request)
        if request.exposed? && !request.abandoned? && cancelled?(request.result)
          request.result.clear
          resend(request)
        else
          deliver(request)
          @owner.slot_freed(self)
        end
        @queue.empty? ? release_if_idle : cancel_abandoned_head
      end

      def deliver(request)
        result = request.result
        if request.abandoned?
          result&.clear
          request.settle
        elsif result.nil?
          request.settle(MissingResult.new("PostgreSQL returned no result for: #{request.sql}"))
        else
          begin
            result.check
            request.settle
          rescue PG::Error => e
            request.settle(e)
          end
        end
      end

      def cancelled?(result)
        !result.nil? && result.result_status == PG::PGRES_FATAL_ERROR &&
          result.error_field(PG::PG_DIAG_SQLSTATE) == QUERY_CANCELED
      end

      # Sends a request again at the end of the queue (its caller keeps waiting for it).
      def resend(request)
        request.result = nil
        request.exposed = @cancelling
        submit(request)
      rescue PG::Error => e # ConnectionError included: everything in flight failed with it
        request.settle(e) unless request.settled?
      end

      # With nothing in flight the connection goes back to the pool, unless a cancel request is
      # still on its way: it would hit the next user's statement.
      def release_if_idle
        @owner.pipeline_drained(self) if idle?
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
        if @reader
          # A reader waiting on the socket would never hear of its closing (libpq closes the
          # descriptor underneath Ruby): shut the socket down so that it wakes; it gives the
          # connection up as it leaves (#lead).
          shut_socket
        else
          @owner.connection_lost(self)
        end
      end

      def shut_socket
        @raw.socket_io.shutdown(Socket::SHUT_RDWR)
      rescue PG::Error, IOError, SystemCallError
        nil # closed already
      end

      def lost_message(error)
        "connection to PostgreSQL at #{@address} lost with statements in flight: " \
          "#{error.message.strip} (#{error.class})"
      end

      # Called as an interrupted waiter leaves; the statement stays in the queue until its sync
      # point comes back.
      def abandon(request)
        request.abandon
        cancel_abandoned_head
      end

      # If the statement at the head of the queue (the one the server runs now) was abandoned,
      # starts a background task that cancels it on the server, unless one is at work already.
      def cancel_abandoned_head
        return if @tidying || !@queue.first&.abandoned?
        @tidying = true
        Background.run("weft-postgres cancel") { @lock.synchronize { cancel_abandoned } }
      end

      # In the background task: while the head is abandoned, has it cancelled. If the server
      # does not end it within CANCEL_GRACE, the connection is given up.
      def cancel_abandoned
        while (head = @queue.first)&.abandoned?
          next if cancel_until_settled(head)

          lost(Unresponsive.new("a cancelled statement did not end within #{CANCEL_GRACE}s"))
        end
      ensure
        @tidying = false
      end

      # Asks the server to cancel the statement (again every CANCEL_REPEAT seconds) and reads,
      # if nobody else does, until it is settled. A statement whose result has arrived ran to
      # its end: it is not cancelled, only awaited.
      # @return [Boolean] false if it was not settled within CANCEL_GRACE
      def cancel_until_settled(head)
        give_up = Deadline.after(CANCEL_GRACE)
        until head.settled?
          return false if give_up.expired?
          send_cancel(head) if head.result.nil?
          wait_for(Thread::ConditionVariable.new, Deadline.earliest(Deadline.after(CANCEL_REPEAT), give_up)) do
            head.settled?
          end
        end
        true
      end

      # Sends the cancel request with the lock released, and nothing new down this connection
      # until it is delivered (fenced); everything in flight meanwhile is exposed to it.
      def send_cancel(target)
        @cancelling = true
        @queue.each { |request| request.exposed = true unless request.equal?(target) }
        begin
          @owner.unlocked { @raw.cancel } # pg's cancel waits on sockets: the reactor keeps turning
        ensure
          @cancelling = false
        end
        @owner.pipeline_reopened(self)
        @waiters.each(&:signal) # a drain waiting for the cancel request to be delivered
        release_if_idle
      end

      # The server did not settle a cancelled statement in time.
      class Unresponsive < StandardError
        include Error
      end
      private_constant :Unresponsive
    end
  end
end
