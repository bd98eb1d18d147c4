# frozen_string_literal: true

require "rack"
require_relative "../weft"
require_relative "server/config"
require_relative "server/listener"
require_relative "server/idle_pool"
require_relative "server/statistics"
require_relative "server/connection"
require_relative "server/access_log"
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
    # @return [String] @api private: the scratch buffer connections read sockets into. One per
    #   reactor is enough: the bytes are copied out before the reading fiber can yield.
    attr_reader :read_buffer

    # @param app [#call] the Rack app
    # @param config [Config, nil] settings; or pass them as keywords (see Config::DEFAULTS)
    # @param listeners [Array<Listener>, nil] already bound sockets (default: bind config's URLs)
    def initialize(app, config = nil, listeners: nil, worker_index: nil, board: nil, **options)
      @app = app
      @config = config || Config.new(options)
      @listeners = listeners || @config.bind_urls.map { |url| Listener.bind(url, backlog: @config[:backlog]) }
      @worker_index = worker_index
      @board = board
      @statistics = Statistics.new(self)
      @access_log = AccessLog.open(@config[:access_log])
      @error_log = ErrorLog.new(@config[:error_summary_interval])
      @idle_pool = IdlePool.new { |connection| serve_in_task(connection, :resume) }
      @connections = {}.compare_by_identity
      @tasks = {}.compare_by_identity
      @in_flight = 0
      @stopping = false
      @stop_reader, @stop_writer = IO.pipe
      @capacity_waiter = nil
      @env_templates = {}.compare_by_identity
      @host_cache = {}
      @multiprocess = !worker_index.nil?
      @read_buffer = String.new(capacity: Connection::READ_SIZE, encoding: Encoding::BINARY)
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
        accepters = @listeners.map { |listener| Weft.spawn(listener, name: "weft accept #{listener.url}") { |l| accept_loop(l) } }
        publisher = @board && Weft.spawn(name: "weft stats publisher") { publish_statistics }
        wait_for_stop
        shutdown(accepters + [publisher].compact)
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

    # @return [Integer] open client connections (parked or busy)
    def open_connections
      @connections.size
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

    # @api private: the env entries that are the same for every request on a listener
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
        "SERVER_SOFTWARE" => SOFTWARE
      }.freeze
    end

    # @api private: runs the app for one request and writes its response.
    # @return [Boolean] whether the connection may carry another request
    def call_app(connection, env, keep_alive)
      @in_flight += 1
      @statistics.request!
      started = Timers.now
      keep_alive = false if @stopping
      fill_server_name(env, connection.listener)
      env["rack.hijack"] = connection.hijack_proc
      env["rack.response_finished"] = finished = []
      status = headers = body = error = nil
      begin
        status, headers, body = internal_response(env) || @app.call(env)
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

    # @return [String] the current time as an HTTP date, recomputed at most once a second
    def self.http_date
      now = Process.clock_gettime(Process::CLOCK_REALTIME, :second)
      return @http_date if now == @http_date_second
      @http_date_second = now
      @http_date = Time.at(now).httpdate.freeze
    end

    private

    def accept_loop(listener)
      max = @config[:max_connections]
      loop do
        wait_for_capacity while @connections.size >= max
        socket = listener.accept_nonblock
        unless socket
          listener.socket.wait_readable
          next
        end
        @statistics.accepted!
        connection = Connection.new(self, socket, listener)
        @connections[connection] = true
        serve_in_task(connection, :start)
      end
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

    # Back-pressure: at max_connections the accept loop stops accepting (new clients wait in
    # the kernel's backlog) until a connection closes.
    def wait_for_capacity
      @capacity_waiter = Fiber.current
      Weft.scheduler.suspend(1, self)
    ensure
      @capacity_waiter = nil
    end

    def release_capacity
      waiter = @capacity_waiter
      Weft.scheduler&.wake(waiter, true, self) if waiter
    end

    def wait_for_stop
      loop do
        @stop_reader.wait_readable
        break if @stop_reader.read_nonblock(64, exception: false).is_a?(String)
      end
    end

    def shutdown(service_tasks)
      @stopping = true
      service_tasks.each(&:cancel)
      @listeners.each(&:close)
      @idle_pool.stop
      @idle_pool.close_all
      deadline = Timers.now + @config[:shutdown_timeout]
      sleep(0.01) until @tasks.empty? || Timers.now >= deadline
      unless @tasks.empty?
        Weft.logger.warn("shutdown timeout: cancelling #{@tasks.size} request(s) still running")
        @tasks.each_key(&:cancel)
      end
      @connections.keys.each(&:close)
      @error_log.stop
      @board&.publish(@statistics.snapshot)
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

    def close_body(body)
      body.close if body.respond_to?(:close)
    rescue StandardError => e
      log_error("body.close", e)
    end
  end
end
