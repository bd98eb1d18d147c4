# frozen_string_literal: true

require_relative "../semaphore"
require_relative "connection_settings"
require_relative "idle_pool"
require_relative "connection"
require_relative "hijacked_sockets"
require_relative "partial_heads"

module Weft
  class Server
    # The server as its client connections see it, and the registry of those connections:
    # which are open, which tasks are serving them, and how many more may be admitted.
    #
    # A Connection holds this object, not the Server. What it may use is this interface, and
    # nothing else of the server:
    #
    #   settings, read_buffer             ConnectionSettings; the scratch buffer socket reads go through
    #   rack                              the RackAdapter a request goes through (#new_env, #call)
    #   statistics, log_error             counting client and parse errors; logging unexpected ones
    #   stopping?, drain_remaining        the graceful stop
    #   park                              between requests: into the IdlePool, with no fiber
    #   park_head, release_head           a head parked unfinished, within partial_head_budget
    #   hand_over                         taken by the app (hijack, streaming body)
    #   forget                            closed (a handed-over one too, when closed through
    #                                     the server's Stream)
    #
    # The Server uses the rest: #admit, #full?, #reclaim_idle and #wait_for_room (the accept
    # loop at max_connections, or out of file descriptors), #sweep_hijacked (its sweeping
    # task), and the stop (#begin_stop, #busy?, #cancel_tasks, #close_all).
    #
    # A connection the application took over still counts, against max_connections and in the
    # load published to the siblings (AcceptSpread), until the application closes it
    # (HijackedSockets): it still holds a descriptor and memory of this process.
    #
    #   host = ConnectionHost.new(config, rack: rack, statistics: statistics, error_log: error_log)
    #   host.admit(socket, listener) # serves it in a task of its own
    class ConnectionHost
      # @return [ConnectionSettings]
      attr_reader :settings
      # @return [String] the scratch buffer connections read sockets into. One per reactor is
      #   enough: the bytes are copied out before the reading fiber can yield.
      attr_reader :read_buffer
      # @return [RackAdapter]
      attr_reader :rack
      # @return [Statistics]
      attr_reader :statistics
      # @return [IdlePool] where connections wait between requests
      attr_reader :idle_pool

      # @param config [Config] read for the connection settings, max_connections and drain_grace
      # @param rack [RackAdapter]
      # @param statistics [Statistics]
      # @param error_log [ErrorLog]
      # @param spread [AcceptSpread, nil] told the open connections as they change (a cluster
      #   worker publishes them to its siblings)
      def initialize(config, rack:, statistics:, error_log:, spread: nil)
        @settings = ConnectionSettings.from(config)
        @read_buffer = String.new(capacity: Connection::READ_SIZE, encoding: Encoding::BINARY)
        @rack = rack
        @statistics = statistics
        @error_log = error_log
        @spread = spread
        @idle_pool = IdlePool.new { |connection| serve(connection, :resume) }
        @drain_grace = config[:drain_grace]
        # A permit per open connection, held from #admit until it is closed (a hijacked one:
        # until the application closes it). Past the limit (only the connections the stop takes
        # off the backlog, see #admit) the count stays at the limit: permits held =
        # min(open connections + hijacked, max_connections).
        @capacity = Semaphore.new(config[:max_connections])
        @connections = {}.compare_by_identity
        @hijacked = HijackedSockets.new
        @tasks = {}.compare_by_identity
        @stopping = false
        @shutdown_deadline = nil
        @partial_heads = PartialHeads.new(config[:partial_head_budget]) if config[:partial_head_budget]
      end

      # @return [PartialHeads, nil] the budget of parked partial heads (nil: none set)
      attr_reader :partial_heads

      # --- For connections ----------------------------------------------------------------

      # @return [Boolean] whether a graceful stop is under way (connections close after their
      #   current request). An attribute reader under a predicate's name: a connection asks
      #   between any two requests, and a reader, unlike a method, pushes no Ruby frame.
      attr_reader :stopping
      alias stopping? stopping
      private :stopping

      # @param connection [Connection]
      # @return [Float] seconds left, during a graceful stop, for a connection between requests
      #   to send one more (see Connection#drain): `drain_grace` from when it became idle,
      #   within the shutdown timeout
      def drain_remaining(connection)
        return 0.0 unless @shutdown_deadline
        remaining = [connection.idle_since + @drain_grace, @shutdown_deadline].min - Timers.now
        remaining.positive? ? remaining : 0.0
      end

      # Parks a connection between requests in the IdlePool (no fiber) until its socket is
      # readable or `timeout` passes. A parked connection can be closed to admit a new client at
      # max_connections: if the accept loop waits for room (#wait_for_room), the oldest idle one
      # is reclaimed now (unless a permit came free meanwhile: the waiter has room already).
      # @param connection [Connection]
      # @param timeout [Numeric] seconds
      def park(connection, timeout)
        @idle_pool.park(connection, timeout)
        reclaim_idle if @capacity.waiting.positive? && full?
      end

      # Parks a connection whose head is not complete (#park), holding `bytes` of it against
      # partial_head_budget: past the budget the oldest large partial heads parked are dropped
      # (Connection#head_dropped: a 431 if the socket takes it at once, then closed).
      # @param connection [Connection]
      # @param timeout [Numeric] seconds left of its header_timeout
      # @param bytes [Integer] of memory the head so far holds (Connection#memory_held_by_head)
      def park_head(connection, timeout, bytes)
        park(connection, timeout)
        @partial_heads&.hold(connection, bytes) do |victim|
          victim.head_dropped if @idle_pool.remove(victim)
        end
      end

      # The connection no longer holds a parked partial head (complete, answered, closed).
      # @param connection [Connection]
      def release_head(connection)
        @partial_heads&.release(connection)
      end

      # The app took the connection's socket (full or partial hijack, a streaming body): the
      # server no longer serves it, but it counts until the app closes it (HijackedSockets).
      # @param connection [Connection] not closed
      # @return [Integer] the token #forget takes it off with, if it is closed through the
      #   server's own objects (Server::Stream#close)
      def hand_over(connection)
        @connections.delete(connection)
        @hijacked.add(connection.to_io)
      end

      # The connection is closed: it no longer counts. Idempotent.
      # @param connection [Connection]
      # @param hijacked [Integer, nil] its token from #hand_over, if the app had taken it
      def forget(connection, hijacked = nil)
        if hijacked
          return unless @hijacked.remove(hijacked)
        else
          return unless @connections.delete(connection)
        end
        closed(1)
      end

      # Logs an error with its backtrace; repeats of it are counted and summed up in one line
      # every error_summary_interval (see ErrorLog).
      # @param context [String] what was being done, e.g. "connection 10.0.0.1"
      # @param error [Exception]
      def log_error(context, error)
        @error_log.report(context, error)
      end

      # --- For the server -----------------------------------------------------------------

      # @return [Integer] open connections the server serves (parked or busy)
      def size
        @connections.size
      end

      # @return [Integer] connections the app took over and has not closed yet (as of the last
      #   #sweep_hijacked for a full hijack)
      def hijacked
        @hijacked.size
      end

      # Stops counting the hijacked sockets the app has closed, or dropped for the GC to close,
      # since the last look (the server calls it every HijackedSockets::SWEEP_INTERVAL, and at
      # max_connections before making room): their room is given back, and the lower load
      # published.
      # @param unless_within [Numeric] seconds: no look if the last one is more recent
      # @return [Integer] how many
      def sweep_hijacked(unless_within = 0)
        return 0 if @hijacked.size.zero?
        gone = @hijacked.sweep(unless_within)
        closed(gone) if gone.positive?
        gone
      end

      # @return [Boolean] whether max_connections are open
      def full?
        @capacity.blocking?
      end

      # Registers a newly accepted socket and starts serving it in a task of its own. The
      # accept loop admits only while not #full?; the stop admits what is left in the backlog
      # past the limit too (each is answered once, then closed).
      # @param socket [Socket]
      # @param listener [Listener] where it was accepted
      def admit(socket, listener)
        @statistics.accepted!
        @capacity.acquire unless full? # never waits: nothing yields between the check and this
        connection = Connection.new(self, socket, listener)
        @connections[connection] = true
        @spread&.opened(@connections.size + @hijacked.size)
        serve(connection, :start)
      end

      # Closes the connection parked the longest (see IdlePool#reclaim_oldest), to admit a new
      # one.
      # @return [Boolean] whether one was closed
      def reclaim_idle
        return false unless @idle_pool.reclaim_oldest
        @statistics.reclaimed!
        true
      end

      # Waits until a connection closes (a permit comes free), or parks and is reclaimed for
      # this waiter (#park). The permit is given back at once: #admit takes it for the client.
      # While the app holds hijacked sockets, for HijackedSockets::SWEEP_GAP at most: one of
      # them may be closed already, which only a look finds (the caller looks again:
      # Server#make_room), and a client must not wait for the periodic sweep.
      def wait_for_room
        timeout = HijackedSockets::SWEEP_GAP unless @hijacked.size.zero?
        @capacity.release if @capacity.acquire(timeout: timeout)
      end

      # Starts the graceful stop: connections close after their current request, and one
      # between requests may send one more within its drain grace (#drain_remaining).
      # @param deadline [Float] Timers.now by which everything must be done
      def begin_stop(deadline)
        @shutdown_deadline = deadline
        @stopping = true
        @rack.begin_stop
      end

      # @return [Boolean] whether a task is serving a connection
      def busy?
        !@tasks.empty?
      end

      # Cancels the tasks still serving connections (the shutdown timeout passed).
      # @return [Integer] how many were cancelled
      def cancel_tasks
        count = @tasks.size
        @tasks.each_key(&:cancel)
        count
      end

      # Closes every open connection.
      def close_all
        @connections.keys.each(&:close)
      end

      # @api private: serves a connection in the current task (see #serve).
      def run(connection, method)
        connection.public_send(method)
      ensure
        @tasks.delete(Task.current)
      end

      private

      # `count` connections stopped counting: their permits back (those held, see @capacity),
      # the load published.
      def closed(count)
        open = @connections.size + @hijacked.size
        permits = @capacity.limit - open
        permits = count if count < permits
        while permits.positive?
          @capacity.release
          permits -= 1
        end
        @spread&.closed(open)
      end

      # Starts a task for a connection (method :start for a new one, :resume for one the
      # IdlePool hands back). It is not a child of the accepting task, so that cancelling the
      # accept loop at shutdown leaves in-flight requests to finish. The task is registered as
      # it is spawned, not as it starts (on the reactor's next turn), so that the stop waits for
      # a connection it has just admitted instead of closing it unread, which resets it.
      # Spawned through the scheduler itself, as Weft.spawn(detached: true) would, but allowed
      # from the reactor's loop fiber too: a connection lingering after its 408 is parked from
      # an idle timer's callback (Connection#idle_expired), and parking may hand a reclaimed
      # connection with a request waiting back to be served.
      def serve(connection, method)
        task = Weft.scheduler.spawn(nil, "weft connection", [self, connection, method], SERVE)
        @tasks[task] = true
      end

      SERVE = ->(host, connection, method) { host.run(connection, method) }
      private_constant :SERVE
    end
  end
end
