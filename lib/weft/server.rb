# frozen_string_literal: true

require "rack"
require_relative "../weft"
require_relative "server/config"
require_relative "server/listener"
require_relative "server/statistics"
require_relative "server/connection_host"
require_relative "server/rack_adapter"
require_relative "server/access_log"
require_relative "server/stall_detector"
require_relative "server/error_log"
require_relative "server/accept_spread"

module Weft
  # A Rack server with a fiber per request, running on Weft's reactor: whatever the app does
  # that blocks (sockets, Net::HTTP, pg, sleep...) only parks its own request's fiber.
  #
  # One Server serves in one process and one reactor. Weft::Server::Cluster runs one per
  # worker process; `weft serve` and the rackup handler pick between the two.
  #
  # The Server itself is the lifecycle: binding, the accept loops, max_connections, the
  # graceful stop, the worker's heartbeat and statistics. A request goes through the
  # RackAdapter; the connections and what they may use of the server are the ConnectionHost's.
  #
  #   server = Weft::Server.new(app, Weft::Server::Config.new(binds: ["tcp://127.0.0.1:9292"]))
  #   server.run # until #stop (SIGTERM, SIGINT when run from the CLI)
  #
  # See docs/server.md for the connection lifecycle and the design decisions.
  class Server
    SOFTWARE = "Weft/#{VERSION}"
    # The signals that stop a serving process (a single process, a cluster's master or worker)
    # gracefully: in-flight requests finish within shutdown_timeout (Server#stop, Cluster). HUP
    # among them, as in Puma: a terminal hangup signals the whole process group, and Ruby's
    # default for HUP (an exception in the main thread) cut every request in flight and ended a
    # master without a word in its log. Not a reload, as in nginx or Unicorn: USR1 and USR2 are.
    GRACEFUL_STOP_SIGNALS = %w[TERM INT QUIT HUP].freeze

    # Runs `handler` (a graceful stop) on GRACEFUL_STOP_SIGNALS. HUP stays ignored in a process
    # started with it ignored (`nohup weft serve`, a supervisor that ignores it): such a server
    # must outlive its terminal, as it did when HUP was left to Ruby, which keeps an ignored
    # HUP ignored.
    # @return [void]
    def self.trap_stop_signals(&handler)
      GRACEFUL_STOP_SIGNALS.each do |name|
        Signal.trap(name, "IGNORE") if Signal.trap(name, &handler) == "IGNORE" && name == "HUP"
      end
    end

    # @return [Config]
    attr_reader :config
    # @return [IdlePool]
    attr_reader :idle_pool
    # @return [PartialHeads, nil] the unfinished heads parked, within partial_head_budget
    #   (nil without a budget)
    def partial_heads
      @host.partial_heads
    end
    # @return [Statistics]
    attr_reader :statistics
    # @return [Array<Listener>]
    attr_reader :listeners
    # @return [Integer, nil] the worker's index in a cluster, nil when running alone
    attr_reader :worker_index
    # @return [Statistics::Board, nil]
    attr_reader :board

    # @param app [#call] the Rack app
    # @param config [Config, nil] settings; or pass them as keywords (see Config::DEFAULTS)
    # @param listeners [Array<Listener>, nil] already bound sockets (default: bind config's URLs)
    # @param worker_index [Integer, nil] the worker's index in a cluster
    # @param board [Statistics::Board, nil] where a worker publishes its statistics
    # @param heartbeat [IO, nil] a pipe to the master, written to while the reactor turns
    # @param spread [AcceptSpread, nil] a cluster worker's share in spreading new connections
    #   over the workers of a shared listening socket (none: accept whenever one is queued)
    def initialize(app, config = nil, listeners: nil, worker_index: nil, board: nil, heartbeat: nil, spread: nil, **options)
      @config = config || Config.new(options)
      @listeners = listeners || @config.bind_urls.map { |url| Listener.bind(url, backlog: @config[:backlog]) }
      @worker_index = worker_index
      @board = board
      @heartbeat = heartbeat
      @spread = spread
      @stall_detector = StallDetector.new(@config[:stall_threshold], report_after: @config[:worker_timeout] / 2.0,
                                          name: worker_index && "worker #{worker_index}, pid #{Process.pid}")
      @statistics = Statistics.new(self)
      @error_log = ErrorLog.new(@config[:error_summary_interval])
      @rack = RackAdapter.new(app, @config, statistics: @statistics, error_log: @error_log,
                                            access_log: AccessLog.open(@config[:access_log]),
                                            multiprocess: !worker_index.nil?)
      @host = ConnectionHost.new(@config, rack: @rack, statistics: @statistics, error_log: @error_log, spread: @spread)
      @idle_pool = @host.idle_pool
      @stop_reader, @stop_writer = IO.pipe
    end

    # @return [String] the bound URLs (and the worker's index), for logs and the console
    def inspect
      "#<#{self.class.name} #{bound_urls.join(' ')}#{" worker=#{@worker_index}" if @worker_index}>"
    end
    alias to_s inspect

    # Serves until #stop, then finishes in-flight requests (up to shutdown_timeout) and
    # returns. Runs its own reactor, or inside the caller's when called under Weft.run.
    def run
      Weft.run do
        @idle_pool.start
        @error_log.start
        @stall_detector.start
        worker_tasks = start_worker_tasks
        # The heartbeat goes on through the graceful stop: a draining worker is alive.
        heartbeat = @heartbeat && Weft.spawn(name: "weft heartbeat") { beat }
        @spread&.start
        accepters = @listeners.map { |listener| Weft.spawn(listener, name: "weft accept #{listener.url}") { |l| accept_loop(l) } }
        publisher = @board && Weft.spawn(name: "weft stats publisher") { publish_statistics }
        sweeper = Weft.spawn(name: "weft hijacked sweep") { sweep_hijacked }
        begin
          wait_for_stop
          shutdown(accepters + [publisher, sweeper].compact)
        ensure
          # Last, so that requests still draining could rely on what the worker tasks provide.
          worker_tasks.each(&:cancel)
          heartbeat&.cancel
          @stall_detector.stop
        end
      end
    end

    # Asks the server to stop gracefully. Safe to call from a signal handler, another thread
    # or a task.
    def stop
      @stop_writer.write_nonblock(".", exception: false)
    rescue IOError
      nil
    end

    # @return [Boolean] whether a graceful stop is under way (connections close after their
    #   current request)
    def stopping?
      @host.stopping?
    end

    # @return [Integer] requests being processed now
    def in_flight
      @statistics.in_flight
    end

    # @return [Integer] open client connections the server serves (parked or busy)
    def open_connections
      @host.size
    end

    # @return [Integer] connections the app took over (full or partial hijack, streaming
    #   bodies) and has not closed yet; they count against max_connections and in the load a
    #   cluster worker publishes (seen closed within HijackedSockets::SWEEP_INTERVAL after a
    #   full hijack, at once when closed through the server's Stream)
    def hijacked_connections
      @host.hijacked
    end

    # @return [Integer] reactor stalls detected (see StallDetector)
    def reactor_stalls
      @stall_detector.count
    end

    # @return [Integer] times a queued connection was left to a less loaded worker for a
    #   moment (AcceptSpread); 0 outside a cluster or with spread_connections off
    def accepts_deferred
      @spread ? @spread.deferred : 0
    end

    # @return [Array<String>] the URLs the server listens on, with the bound ports
    def bound_urls
      @listeners.map(&:bound_url)
    end

    # @return [String] "date: <now as an HTTP date>\r\n", the line every response carries,
    #   built at most once a second (the line is stored before its second, so a reactor on
    #   another thread never pairs a new second with the old line)
    def self.date_line
      now = Process.clock_gettime(Process::CLOCK_REALTIME, :second)
      return @date_line if now == @date_second
      @date_line = "date: #{Time.at(now).httpdate}\r\n".freeze
      @date_second = now
      @date_line
    end

    private

    # Accepts while connections are queued, then waits for the next. In a cluster whose workers
    # share the listener, a worker that holds noticeably more connections than a sibling stops
    # taking them greedily, and leaves the next to that sibling for a moment (AcceptSpread):
    # without it, the worker the kernel happens to run first takes every queued connection.
    def accept_loop(listener)
      loop do
        if @host.full?
          make_room(listener)
          next
        end
        socket = accept(listener)
        if socket
          @host.admit(socket, listener)
          next unless @spread&.lighter_sibling
        end
        listener.socket.wait_readable
        # A connection is queued: a worker noticeably above a sibling leaves it to that
        # sibling for a moment before taking it.
        @spread&.defer
      end
    end

    # @return [Socket, nil] an accepted connection, or nil when none is waiting or no file
    #   descriptor is left. Out of descriptors, an idle connection is closed to free one, or,
    #   with none idle, accepting pauses briefly (the accept loop must not die of it).
    def accept(listener)
      listener.accept_nonblock
    rescue Errno::EMFILE, Errno::ENFILE, Errno::ENOBUFS, Errno::ENOMEM => e
      unless @host.reclaim_idle
        Weft.logger.warn("accept on #{listener.url}: #{e.message}; pausing 0.1 s")
        sleep(0.1)
      end
      nil
    end

    # At a stop, connections the kernel has queued on a listener are taken and served (their
    # request is answered with `connection: close`) before it is closed: closing would reset
    # them, and their clients may have sent a request already. Past max_connections too: the
    # queue is bounded by the backlog, and each holds its connection for one request only.
    def accept_pending(listener)
      while (socket = listener.accept_nonblock)
        @host.admit(socket, listener)
      end
    rescue SystemCallError, IOError
      nil # out of descriptors, or the socket is gone: what is left is reset with it
    end

    # At max_connections: once a new client waits in the listener's backlog, close the
    # keep-alive connection idle the longest to admit it (as nginx does: an idle connection
    # costs its client one reconnection, a full server would cost the new client its wait).
    # With none idle (every connection has a request in progress), back-pressure: new clients
    # wait in the kernel's backlog until a connection closes or parks (ConnectionHost#park then
    # reclaims it for them). In a cluster, a sibling with room is given the new client first
    # (AcceptSpread#defer); one that does not take it in time is not waited for again for a
    # while, and then this worker makes room itself. First of all, hijacked sockets the app
    # has closed since the last sweep give their room back (HijackedSockets::SWEEP_GAP).
    def make_room(listener)
      listener.socket.wait_readable
      @host.sweep_hijacked(HijackedSockets::SWEEP_GAP)
      return unless @host.full? # room was made meanwhile
      return if @spread&.defer(full: true) # look again: the sibling may have taken it
      @host.reclaim_idle || @host.wait_for_room
    end

    # The `worker_task` hooks, each in a task of its own in this reactor, started before the
    # accept loops. They are how an app runs something alongside the server in the same
    # process and reactor (a second listener, a heartbeat, a LISTEN loop): code run from
    # `after_worker_boot` runs before the reactor exists, and a thread of its own would have to
    # compete with the reactor for the GVL. A hook's failure is logged at once; the server keeps
    # serving.
    def start_worker_tasks
      @config[:worker_task].map do |hook|
        Weft.spawn(hook, name: "weft worker task") do |task_hook|
          task_hook.call(self)
        rescue StandardError => e
          @error_log.report("worker_task", e)
        end
      end
    end

    def wait_for_stop
      loop do
        @stop_reader.wait_readable
        break if @stop_reader.read_nonblock(64, exception: false).is_a?(String)
      end
    end

    # Graceful stop. Requests in progress finish, their responses saying `connection: close`.
    # A connection between requests (its last response was written before the stop) that
    # became idle less than `drain_grace` ago may still send one request, answered the same
    # way, until that grace is over; then it is closed. A busy keep-alive client sends its next
    # request at any moment, and closing under it would lose that request with no way for the
    # client to know whether it was processed. Connections idle for longer are closed at once.
    def shutdown(service_tasks)
      now = Timers.now
      grace = @config[:drain_grace]
      deadline = now + @config[:shutdown_timeout]
      @host.begin_stop(deadline)
      @spread&.stop # siblings no longer leave connections to this worker
      service_tasks.each(&:cancel)
      @listeners.each do |listener|
        accept_pending(listener)
        listener.close
      end
      # Handed back, a parked connection serves a request that already arrived, or closes.
      @idle_pool.release { |connection| connection.idle_since + grace <= now }
      # The others stay parked through their grace (a request wakes them as usual).
      drained = [now + grace, deadline].min
      sleep(0.01) until (!@host.busy? && @idle_pool.size.zero?) || Timers.now >= drained
      @idle_pool.stop
      sleep(0.01) until !@host.busy? || Timers.now >= deadline
      if @host.busy?
        cancelled = @host.cancel_tasks
        Weft.logger.warn("shutdown timeout: cancelled #{cancelled} request(s) still running")
      end
      @host.close_all
      @error_log.stop
      @board&.publish(@statistics.snapshot)
    end

    # Writes a byte to the master's pipe every interval, from a task: it only runs while the
    # reactor turns, so a worker stuck in a loop stops beating and the master replaces it
    # (Cluster, worker_timeout). A byte a second at most costs the master nothing.
    def beat
      interval = [@config[:worker_timeout] / 4.0, 1.0].min
      loop do
        @heartbeat.write_nonblock(".", exception: false)
        sleep(interval)
      end
    rescue IOError, SystemCallError
      nil # the master is gone; the cluster's master watch stops this worker
    end

    # Every HijackedSockets::SWEEP_INTERVAL: hijacked sockets the app has closed (or dropped,
    # and the GC collected) stop counting. A full hijack hands the app a plain IO, whose close
    # has no hook the server could use (HijackedSockets).
    def sweep_hijacked
      loop do
        sleep(HijackedSockets::SWEEP_INTERVAL)
        @host.sweep_hijacked
      end
    end

    def publish_statistics
      loop do
        @board.publish(@statistics.snapshot)
        sleep(1)
      end
    end
  end
end
