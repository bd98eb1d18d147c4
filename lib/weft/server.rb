# frozen_string_literal: true

require "rack"
require_relative "../weft"
require_relative "server/config"
require_relative "server/listener"
require_relative "server/idle_pool"
require_relative "server/statistics"
require_relative "server/connection"
require_relative "server/access_log"
require_relative "server/stall_detector"
require_relative "server/error_log"

module Weft
  # A Rack server with a fiber per request, running on Weft's reactor: whatever the app does
  # that blocks (sockets, Net::HTTP, pg, sleep...) only parks its own request's fiber.
  #
  # One Server serves in one process and one reactor. Weft::Server::Cluster runs one per
  # worker process; `weft serve` and the rackup handler pick between the two.
  #
  #   server = Weft::Server.new(app, Weft::Server::Config.new(binds: ["tcp://127.0.0.1:9292"]))
  #   server.run # until #stop (SIGTERM, SIGINT when run from the CLI)
  #
  # See docs/server.md for the connection lifecycle and the design decisions.
  class Server
    SOFTWARE = "Weft/#{VERSION}"

    # @return [Config]
    attr_reader :config
    # @return [IdlePool]
    attr_reader :idle_pool
    # @return [Statistics]
    attr_reader :statistics
    # @return [Array<Listener>]
    attr_reader :listeners
    # @return [Integer, nil] the worker's index in a cluster, nil when running alone
    attr_reader :worker_index
    # @return [Statistics::Board, nil]
    attr_reader :board
    # @return [Integer] requests being processed now
    attr_reader :in_flight
    # @return [ConnectionSettings] @api private: the settings connections read per request
    attr_reader :connection_settings
    # @return [String] @api private: the scratch buffer connections read sockets into. One per
    #   reactor is enough: the bytes are copied out before the reading fiber can yield.
    attr_reader :read_buffer

    # @param app [#call] the Rack app
    # @param config [Config, nil] settings; or pass them as keywords (see Config::DEFAULTS)
    # @param listeners [Array<Listener>, nil] already bound sockets (default: bind config's URLs)
    # @param worker_index [Integer, nil] the worker's index in a cluster
    # @param board [Statistics::Board, nil] where a worker publishes its statistics
    # @param heartbeat [IO, nil] a pipe to the master, written to while the reactor turns
    def initialize(app, config = nil, listeners: nil, worker_index: nil, board: nil, heartbeat: nil, **options)
      @app = app
      @config = config || Config.new(options)
      @listeners = listeners || @config.bind_urls.map { |url| Listener.bind(url, backlog: @config[:backlog]) }
      @worker_index = worker_index
      @board = board
      @heartbeat = heartbeat
      @stall_detector = StallDetector.new(@config[:stall_threshold], report_after: @config[:worker_timeout] / 2.0,
                                          name: worker_index && "worker #{worker_index}, pid #{Process.pid}")
      @statistics = Statistics.new(self)
      @access_log = AccessLog.open(@config[:access_log])
      @error_log = ErrorLog.new(@config[:error_summary_interval])
      @idle_pool = IdlePool.new { |connection| serve_in_task(connection, :resume) }
      @connections = {}.compare_by_identity
      @tasks = {}.compare_by_identity
      @in_flight = 0
      @stopping = false
      @shutdown_deadline = nil
      @stop_reader, @stop_writer = IO.pipe
      @capacity_waiters = []
      @env_templates = {}.compare_by_identity
      @host_cache = {}
      @multiprocess = !worker_index.nil?
      @read_buffer = String.new(capacity: Connection::READ_SIZE, encoding: Encoding::BINARY)
      # Read on every request: kept out of the config's Hash.
      @connection_settings = ConnectionSettings.new(**CONNECTION_SETTINGS.to_h { |key| [key, @config[key]] }).freeze
      @request_deadline = @config[:request_deadline]
      @internal_paths = [@config[:stats_path], @config[:metrics_path]].compact.freeze
    end

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
        accepters = @listeners.map { |listener| Weft.spawn(listener, name: "weft accept #{listener.url}") { |l| accept_loop(l) } }
        publisher = @board && Weft.spawn(name: "weft stats publisher") { publish_statistics }
        begin
          wait_for_stop
          shutdown(accepters + [publisher].compact)
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
      @stopping
    end

    # @return [Float] seconds left, during a graceful stop, for a connection between requests
    #   to send one more (see Connection#drain): `drain_grace` from when it became idle, within
    #   the shutdown timeout
    def drain_remaining(connection)
      return 0.0 unless @shutdown_deadline
      remaining = [connection.idle_since + @config[:drain_grace], @shutdown_deadline].min - Timers.now
      remaining.positive? ? remaining : 0.0
    end

    # @return [Integer] open client connections (parked or busy)
    def open_connections
      @connections.size
    end

    # @return [Integer] reactor stalls detected (see StallDetector)
    def reactor_stalls
      @stall_detector.count
    end

    # @return [Array<String>] the URLs the server listens on, with the bound ports
    def bound_urls
      @listeners.map(&:bound_url)
    end

    # --- Called by connections ---------------------------------------------------------------

    # @api private
    def new_parser
      HTTP1::RequestParser.new(
        max_request_line: @config[:max_request_line],
        max_header_bytes: @config[:max_header_bytes],
        max_headers: @config[:max_headers]
      )
    end

    # @api private: a fresh env for the next request on a connection, before its head is parsed.
    # Built per request from the listener's template rather than kept per connection: a
    # template per connection cost ~800 bytes of every idle keep-alive connection, one more
    # hash insert per request costs next to nothing.
    def new_env(connection)
      env = env_template(connection.listener).dup
      env["REMOTE_ADDR"] = connection.remote_addr
      env
    end

    # @api private: the env entries that are the same for every request on a listener, and
    # the keys every request sets (nil here): a Hash copied from one that already holds them
    # has room for the whole env, where growing it past 16 entries while the request was
    # filled in re-hashed it (3% of a hello-world request's time).
    def env_template(listener)
      @env_templates[listener] ||= {
        "rack.version" => Rack::VERSION.is_a?(Array) ? Rack::VERSION : [1, 3],
        "rack.errors" => $stderr,
        "rack.multithread" => false,
        "rack.multiprocess" => @multiprocess,
        "rack.run_once" => false,
        "rack.url_scheme" => listener.scheme,
        "rack.hijack?" => true,
        "SCRIPT_NAME" => "",
        "SERVER_SOFTWARE" => SOFTWARE,
        **PER_REQUEST_KEYS.to_h { |key| [key, nil] }
      }.freeze
    end

    # The settings a Connection reads for every request, copied out of the Config once.
    CONNECTION_SETTINGS = %i[first_data_timeout idle_timeout header_timeout write_timeout linger
                             max_requests_per_connection].freeze
    ConnectionSettings = Struct.new(*CONNECTION_SETTINGS, keyword_init: true)

    # Set for every request before the app sees the env: REMOTE_ADDR by #new_env, the request
    # line's by the parser, the rest by Connection#serve_one and #call_app.
    PER_REQUEST_KEYS = %w[REMOTE_ADDR REQUEST_METHOD PATH_INFO QUERY_STRING SERVER_PROTOCOL SERVER_NAME SERVER_PORT
                          rack.input rack.hijack rack.response_finished].freeze

    # @api private: runs the app for one request and writes its response. Whether the
    # connection stays open is settled when the response head is written (ResponseWriter): a
    # stop that begins while the app runs still gets `connection: close` into the head.
    # @return [Boolean] whether the connection may carry another request
    def call_app(connection, env, keep_alive)
      @in_flight += 1
      @statistics.request!
      started = Timers.now if @access_log
      fill_server_name(env, connection.listener)
      env["rack.hijack"] = connection.hijack_proc
      env["rack.response_finished"] = finished = []
      status = headers = body = error = nil
      begin
        status, headers, body = (internal_response(env) unless @internal_paths.empty?) || call_under_deadline(env)
      rescue DeadlineExceeded => e
        # The request's own deadline (or one the app set and let escape): the app gave up in
        # time, which is what the deadline is for; the client learns it was not served.
        error = e
        Weft.logger.warn("#{env['REQUEST_METHOD']} #{env['PATH_INFO']}: #{e.message}; answered 503")
        status, headers, body = deadline_exceeded
      rescue StandardError, ScriptError => e
        error = e
        log_error("#{env['REQUEST_METHOD']} #{env['PATH_INFO']}", e)
        status, headers, body = server_error
      end
      return false if connection.detached? # full hijack: the app owns the socket

      begin
        keep_alive = ResponseWriter.write(connection, env, status, headers, body, keep_alive)
      rescue Connection::ClientGone, Connection::ClientTimeout => e
        error ||= e
        raise
      rescue ResponseWriter::InvalidResponse => e
        # Caught before a byte was written: the client gets a clean 500.
        error ||= e
        log_error("#{env['REQUEST_METHOD']} #{env['PATH_INFO']} (invalid response)", e)
        status = 500
        keep_alive = ResponseWriter.write(connection, env, *server_error, false)
      rescue StandardError => e
        # The body failed while streaming: the head is probably out, so the only honest
        # thing left is to cut the connection.
        error ||= e
        log_error("#{env['REQUEST_METHOD']} #{env['PATH_INFO']} (response body)", e)
        status = 500
        keep_alive = false
      ensure
        close_body(body)
      end
      keep_alive && !connection.detached?
    ensure
      @in_flight -= 1
      @statistics.server_error! if status.to_i >= 500
      input = env["rack.input"]
      input.close if input.is_a?(File) || input.is_a?(Tempfile)
      @access_log&.log(env, status, Timers.now - started, connection.remote_addr)
      finished&.each do |callback|
        callback.call(env, status, headers, error)
      rescue StandardError => e
        log_error("rack.response_finished callback", e)
      end
    end

    # @api private: parks a connection between requests in the IdlePool (no fiber). A parked
    # connection can be reclaimed for a new client at max_connections, so the accept loop,
    # if it waits for room, gets another look.
    def park(connection, timeout)
      @idle_pool.park(connection, timeout)
      release_capacity
    end

    # @api private
    def connection_closed(connection)
      @connections.delete(connection)
      release_capacity
    end

    # @api private: the app hijacked the socket; it no longer counts as ours
    def connection_detached(connection)
      connection_closed(connection)
    end

    # @api private: logs an error with its backtrace; repeats of it are counted and summed up
    # in one line every error_summary_interval (see ErrorLog)
    def log_error(context, error)
      @error_log.report(context, error)
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

    def accept_loop(listener)
      max = @config[:max_connections]
      loop do
        if @connections.size >= max
          make_room(listener)
          next
        end
        socket = accept(listener)
        if socket
          admit(socket, listener)
        else
          listener.socket.wait_readable
        end
      end
    end

    # @return [Socket, nil] an accepted connection, or nil when none is waiting or no file
    #   descriptor is left. Out of descriptors, an idle connection is closed to free one, or,
    #   with none idle, accepting pauses briefly (the accept loop must not die of it).
    def accept(listener)
      listener.accept_nonblock
    rescue Errno::EMFILE, Errno::ENFILE, Errno::ENOBUFS, Errno::ENOMEM => e
      if @idle_pool.reclaim_oldest
        @statistics.reclaimed!
      else
        Weft.logger.warn("accept on #{listener.url}: #{e.message}; pausing 0.1 s")
        sleep(0.1)
      end
      nil
    end

    def admit(socket, listener)
      @statistics.accepted!
      connection = Connection.new(self, socket, listener)
      @connections[connection] = true
      serve_in_task(connection, :start)
    end

    # At a stop, connections the kernel has queued on a listener are taken and served (their
    # request is answered with `connection: close`) before it is closed: closing would reset
    # them, and their clients may have sent a request already. Past max_connections too: the
    # queue is bounded by the backlog, and each holds its connection for one request only.
    def accept_pending(listener)
      while (socket = listener.accept_nonblock)
        admit(socket, listener)
      end
    rescue SystemCallError, IOError
      nil # out of descriptors, or the socket is gone: what is left is reset with it
    end

    # Starts a task for a connection. It is not a child of the accepting task, so that
    # cancelling the accept loop at shutdown leaves in-flight requests to finish.
    def serve_in_task(connection, method)
      Weft.spawn(connection, method, name: "weft connection", detached: true, &SERVE)
    end

    SERVE = lambda do |connection, method|
      server = connection.server
      task = Task.current
      server.track(task)
      begin
        connection.public_send(method)
      ensure
        server.untrack(task)
      end
    end
    private_constant :SERVE

    public

    # @api private
    def track(task)
      @tasks[task] = true
    end

    # @api private
    def untrack(task)
      @tasks.delete(task)
    end

    private

    # At max_connections: once a new client waits in the listener's backlog, close the
    # keep-alive connection idle the longest to admit it (as nginx does: an idle connection
    # costs its client one reconnection, a full server would cost the new client its wait).
    # With none idle (every connection has a request in progress), back-pressure: new clients
    # wait in the kernel's backlog until a connection closes or parks.
    def make_room(listener)
      listener.socket.wait_readable
      return if @connections.size < @config[:max_connections] # room was made meanwhile
      if @idle_pool.reclaim_oldest
        @statistics.reclaimed!
      else
        wait_for_capacity
      end
    end

    def wait_for_capacity
      fiber = Fiber.current
      @capacity_waiters << fiber
      Weft.scheduler.suspend(1, self)
    ensure
      @capacity_waiters.delete(fiber)
    end

    def release_capacity
      return if @capacity_waiters.empty?
      scheduler = Weft.scheduler or return
      @capacity_waiters.each { |fiber| scheduler.wake(fiber, true, self) }
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
          log_error("worker_task", e)
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
      deadline = @shutdown_deadline = now + @config[:shutdown_timeout]
      @stopping = true
      service_tasks.each(&:cancel)
      @listeners.each do |listener|
        accept_pending(listener)
        listener.close
      end
      # Handed back, a parked connection serves a request that already arrived, or closes.
      @idle_pool.release { |connection| connection.idle_since + grace <= now }
      # The others stay parked through their grace (a request wakes them as usual).
      drained = [now + grace, deadline].min
      sleep(0.01) until (@tasks.empty? && @idle_pool.size.zero?) || Timers.now >= drained
      @idle_pool.stop
      sleep(0.01) until @tasks.empty? || Timers.now >= deadline
      unless @tasks.empty?
        Weft.logger.warn("shutdown timeout: cancelling #{@tasks.size} request(s) still running")
        @tasks.each_key(&:cancel)
      end
      @connections.keys.each(&:close)
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

    def publish_statistics
      loop do
        @board.publish(@statistics.snapshot)
        sleep(1)
      end
    end

    # SERVER_NAME and SERVER_PORT from the Host header (or the listener). Clients send the same
    # few Host values over and over, so the split is cached per distinct value.
    def fill_server_name(env, listener)
      host = env["HTTP_HOST"]
      if host && !host.empty?
        name, port = @host_cache[host] || cache_host(host, listener)
        env["SERVER_NAME"] = name
        env["SERVER_PORT"] = port
      else
        env["SERVER_NAME"] = listener.host
        env["SERVER_PORT"] = listener.port
      end
    end

    def cache_host(host, listener)
      if host.start_with?("[")
        close = host.index("]") || host.length
        name = host[0..close]
        port = host[close + 2..]
      else
        name, port = host.split(":", 2)
      end
      port = listener.scheme == "https" ? "443" : "80" if port.nil? || port.empty?
      @host_cache.clear if @host_cache.size >= 64
      @host_cache[host.dup.freeze] = [name.freeze, port.freeze].freeze
    end

    # Statistics endpoints, answered by the server itself when configured.
    def internal_response(env)
      path = env["PATH_INFO"]
      if path == @config[:stats_path]
        [200, { "content-type" => "application/json" }, [@statistics.to_json]]
      elsif path == @config[:metrics_path]
        [200, { "content-type" => "text/plain; version=0.0.4" }, [@statistics.to_prometheus]]
      end
    end

    def server_error
      [500, { "content-type" => "text/plain", "content-length" => "22" }, ["Internal Server Error\n"]]
    end

    # The app's call under request_deadline, when one is set: every wait of the request (and of
    # tasks it spawns) ends at it. Streaming the body afterwards is bounded by write_timeout.
    def call_under_deadline(env)
      return @app.call(env) unless @request_deadline
      Weft.deadline(@request_deadline) { @app.call(env) }
    end

    def deadline_exceeded
      [503, { "content-type" => "text/plain", "content-length" => "26" }, ["request deadline exceeded\n"]]
    end

    def close_body(body)
      body.close if !body.is_a?(Array) && body.respond_to?(:close)
    rescue StandardError => e
      log_error("body.close", e)
    end
  end
end
