# frozen_string_literal: true

require "rack"
require "tempfile"
require_relative "response_writer"
require_relative "empty_input"
require_relative "log_text"

module Weft
  class Server
    # Where a parsed request meets the Rack app: builds the env, calls the app (under
    # request_deadline), answers the statistics endpoints itself, turns what the app raised into
    # a 500 (or a 503 for a deadline), writes the response (ResponseWriter), and afterwards runs
    # the rack.response_finished callbacks and writes the access log line.
    #
    # One per Server; its connections reach it as ConnectionHost#rack:
    #
    #   env = rack.new_env(connection)      # then the parser fills in the request line and headers
    #   keep_alive = rack.call(connection, env, keep_alive)
    class RackAdapter
      # Set for every request before the app sees the env: REMOTE_ADDR by #new_env, the request
      # line's by the parser, rack.input by Connection#serve_one, the rest by #call.
      PER_REQUEST_KEYS = %w[REMOTE_ADDR REQUEST_METHOD PATH_INFO QUERY_STRING SERVER_PROTOCOL SERVER_NAME SERVER_PORT
                            rack.input rack.hijack rack.response_finished].freeze

      # @return [HTTP1::FastPath, nil] what answers a plain request in one C call
      #   (Connection#serve_one); nil when every request must come here (an access log or a
      #   request_deadline, which the fast path does not do)
      attr_reader :fast_path
      # @return [#call] the Rack app. A connection on the fast path calls it itself
      #   (Connection#call_app), with nothing of the adapter's around it: the fast path exists
      #   only when there is nothing to add (no access log, no request_deadline).
      attr_reader :app

      # @param app [#call] the Rack app
      # @param config [Config] read for stats_path, metrics_path, request_deadline and
      #   max_requests_per_connection
      # @param statistics [Statistics] counts requests and 5xx responses; renders the endpoints
      # @param error_log [ErrorLog] where the app's errors go
      # @param access_log [AccessLog, nil]
      # @param multiprocess [Boolean] rack.multiprocess (a worker of a cluster)
      def initialize(app, config, statistics:, error_log:, access_log:, multiprocess:)
        @app = app
        @statistics = statistics
        @error_log = error_log
        @access_log = access_log
        @multiprocess = multiprocess
        @stats_path = config[:stats_path]
        @metrics_path = config[:metrics_path]
        @internal_paths = [@stats_path, @metrics_path].compact.freeze
        @request_deadline = config[:request_deadline]
        @env_templates = {}.compare_by_identity
        @host_cache = {}
        unless @access_log || @request_deadline
          @fast_path = HTTP1::FastPath.new(statistics, @host_cache, @internal_paths, EmptyInput::INSTANCE,
                                           ResponseWriter::STATUS_LINES, config[:max_requests_per_connection])
        end
      end

      # The graceful stop began: responses say `connection: close` from now on (the Ruby
      # writer asks Connection#server_stopping? itself).
      def begin_stop
        @fast_path&.server_stopping!
      end

      # A fresh env for the next request on a connection, before its head is parsed. Built per
      # request from the listener's template rather than kept per connection: a template per
      # connection cost ~800 bytes of every idle keep-alive connection, one more hash insert per
      # request costs next to nothing. (Not one env reused for every request either: an app may
      # keep its env past the response, in a task it spawned or a response_finished callback.)
      # @param connection [Connection]
      # @return [Hash]
      def new_env(connection)
        env = env_template(connection.listener).dup
        env["REMOTE_ADDR"] = connection.remote_addr
        env
      end

      # The env entries that are the same for every request on a listener, and the keys every
      # request sets (nil here, or the listener's address for SERVER_NAME and SERVER_PORT, which
      # a Host header replaces): a Hash copied from one that already holds them has room for
      # the whole env, where growing it past 16 entries while the request was filled in
      # re-hashed it (3% of a hello-world request's time).
      # @param listener [Listener]
      # @return [Hash] frozen
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
          **PER_REQUEST_KEYS.to_h { |key| [key, nil] },
          "SERVER_NAME" => listener.host,
          "SERVER_PORT" => listener.port
        }.freeze
      end

      # Runs the app for one request and writes its response. Whether the connection stays
      # open is settled when the response head is written (ResponseWriter): a stop that begins
      # while the app runs still gets `connection: close` into the head.
      # @param connection [Connection]
      # @param env [Hash] from #new_env, with the head parsed and rack.input set
      # @param keep_alive [Boolean] whether the request allows another one after it
      # @return [Boolean] whether the connection may carry another request
      # @raise [Connection::ClientGone, Connection::ClientTimeout] the response could not be written
      def call(connection, env, keep_alive)
        @statistics.request_started!
        started = Timers.now if @access_log
        fill_server_name(env)
        env["rack.hijack"] = connection.hijack_proc
        env["rack.response_finished"] = []
        response = error = nil
        begin
          response = (internal_response(env) unless @internal_paths.empty?) || call_under_deadline(env)
        rescue StandardError, ScriptError => e
          error = e
        rescue Exception => e # rubocop:disable Lint/RescueException
          abandoned(connection, env, e, started)
        end
        respond(connection, env, keep_alive, response, error, nil, started)
      ensure
        @statistics.request_finished!
      end

      # Finishes a request that HTTP1::FastPath#serve ran the app for (counted as started, env
      # complete) but could not answer by itself: it writes the response, or the `unsent` rest
      # of one the socket did not take at once, then does what #call does after the app.
      # @param connection [Connection]
      # @param env [Hash]
      # @param keep_alive [Boolean] whether the request allows another one after it (the fast
      #   path's decision, including a graceful stop, when `unsent` is given)
      # @param response [Array, Object] what the app returned (nil when it raised)
      # @param error [Exception, nil] what the app raised; one that is not a StandardError or
      #   ScriptError (Weft::Cancelled, Interrupt...) is raised again here, as #call does
      # @param unsent [String, nil] the part of the serialized response not sent yet
      # @return [Boolean] whether the connection may carry another request
      # @raise [Connection::ClientGone, Connection::ClientTimeout] the response could not be written
      def finish(connection, env, keep_alive, response, error, unsent)
        abandoned(connection, env, error, nil) unless error.nil? || error.is_a?(StandardError) || error.is_a?(ScriptError)
        respond(connection, env, keep_alive, response, error, unsent, nil)
      ensure
        @statistics.request_finished!
      end

      private

      # The app raised what is not an error of the request (Weft::Cancelled, Interrupt...):
      # nothing is written, the callbacks the app registered run, and the exception goes on up
      # (the task goes away).
      def abandoned(connection, env, exception, started)
        completed(connection, env, nil, nil, nil, started)
        raise exception
      end

      # Everything after the app: the response (a 503 or 500 for what the app raised), then
      # #completed.
      def respond(connection, env, keep_alive, response, error, unsent, started)
        status, headers, body = error ? error_response(env, error) : response
        return false if connection.detached? # full hijack: the app owns the socket

        begin
          keep_alive =
            if unsent
              connection.write(unsent)
              keep_alive
            else
              ResponseWriter.write(connection, env, status, headers, body, keep_alive)
            end
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
        completed(connection, env, status, headers, error, started)
      end

      # After the response (or an app that never returned): the 5xx count, closing a spooled
      # rack.input, the access log line, the rack.response_finished callbacks.
      def completed(connection, env, status, headers, error, started)
        @statistics.server_error! if status.to_i >= 500
        input = env["rack.input"]
        input.close if input.is_a?(File) || input.is_a?(Tempfile)
        @access_log&.log(env, status, Timers.now - started, connection.remote_addr)
        env["rack.response_finished"]&.each do |callback|
          callback.call(env, status, headers, error)
        rescue StandardError => e
          log_error("rack.response_finished callback", e)
        end
      end

      # The response for what the app raised (logged here).
      def error_response(env, error)
        if error.is_a?(DeadlineExceeded)
          # The request's own deadline (or one the app set and let escape): the app gave up in
          # time, which is what the deadline is for; the client learns it was not served.
          Weft.logger.warn("#{LogText.escape("#{env['REQUEST_METHOD']} #{env['PATH_INFO']}")}: " \
                           "#{LogText.escape_message(error.message)}; answered 503")
          deadline_exceeded
        else
          log_error("#{env['REQUEST_METHOD']} #{env['PATH_INFO']}", error)
          server_error
        end
      end

      # SERVER_NAME and SERVER_PORT from the Host header; without one the template's (the
      # listener's address) stay. Clients send the same few Host values over and over, so the
      # split is cached per distinct value (HTTP1::FastPath reads the cache too, and hands a
      # request with a Host not in it to this path).
      def fill_server_name(env)
        host = env["HTTP_HOST"]
        return if host.nil? || host.empty?
        env["SERVER_NAME"], env["SERVER_PORT"] = @host_cache[host] || cache_host(host, env["rack.url_scheme"])
      end

      def cache_host(host, scheme)
        if host.start_with?("[")
          close = host.index("]") || host.length
          name = host[0..close]
          port = host[close + 2..]
        else
          name, port = host.split(":", 2)
        end
        port = scheme == "https" ? "443" : "80" if port.nil? || port.empty?
        @host_cache.clear if @host_cache.size >= 64
        @host_cache[host.dup.freeze] = [name.freeze, port.freeze].freeze
      end

      # The statistics endpoints, answered here when configured; nil for any other path.
      def internal_response(env)
        path = env["PATH_INFO"]
        if path == @stats_path
          [200, { "content-type" => "application/json" }, [@statistics.to_json]]
        elsif path == @metrics_path
          [200, { "content-type" => "text/plain; version=0.0.4" }, [@statistics.to_prometheus]]
        end
      end

      # The app's call under request_deadline, when one is set: every wait of the request (and
      # of tasks it spawns) ends at it. Streaming the body afterwards is bounded by write_timeout.
      def call_under_deadline(env)
        return @app.call(env) unless @request_deadline
        Weft.deadline(@request_deadline) { @app.call(env) }
      end

      def server_error
        [500, { "content-type" => "text/plain", "content-length" => "22" }, ["Internal Server Error\n"]]
      end

      def deadline_exceeded
        [503, { "content-type" => "text/plain", "content-length" => "26" }, ["request deadline exceeded\n"]]
      end

      def close_body(body)
        body.close if !body.is_a?(Array) && body.respond_to?(:close)
      rescue StandardError => e
        log_error("body.close", e)
      end

      # Logged with its backtrace; repeats are summed up (ErrorLog).
      def log_error(context, error)
        @error_log.report(context, error)
      end
    end
  end
end
