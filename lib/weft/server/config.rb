# frozen_string_literal: true

require "etc"

module Weft
  class Server
    # Every setting of a server, with its default, plus the `weft.rb` configuration DSL.
    #
    # A config file is plain Ruby evaluated in a DSL object, in the spirit of puma.rb:
    #
    #   bind "tcp://0.0.0.0:9292"
    #   workers 4
    #   idle_timeout 30
    #   before_fork { DB.disconnect }
    #   after_worker_boot { |index| DB.connect }
    class Config
      # name => default. Timeouts are seconds; sizes are bytes.
      DEFAULTS = {
        binds: [],                 # ["tcp://127.0.0.1:9292", "unix:///tmp/s.sock", "ssl://...?cert=..&key=.."]
        rackup: "config.ru",
        app: nil,                  # a Rack app; wins over rackup
        environment: nil,          # RACK_ENV / RAILS_ENV when set
        workers: nil,              # nil: one per CPU; 0: a single process without a master
        preload: false,            # load the app in the master before forking
        backlog: 1024,
        reuse_port: false,         # cluster: each worker also gets its own SO_REUSEPORT socket
        max_connections: 10_000,   # per process; accept waits while this many are open
        max_requests_per_connection: 10_000,
        first_data_timeout: 30,    # a new connection's first request head must start this soon
        header_timeout: 10,        # from a request's first byte to its complete head
        body_timeout: 30,          # at most this long waiting for any one read of a body
        linger: 0.05,              # a kept-alive connection keeps its fiber this long before parking
        idle_timeout: 20,          # keep-alive connection with no request in progress
        write_timeout: 30,         # at most this long waiting for the client to take any output
        shutdown_timeout: 30,      # graceful stop: in-flight requests get this long
        drain_grace: 1,            # graceful stop: a connection idle for less may send one more request
        worker_boot_timeout: 60,   # a worker that does not report booting is replaced
        worker_timeout: 60,        # a worker whose reactor has not turned for this long is replaced
        stall_threshold: 1,        # code holding the reactor this long is logged with its backtrace
        request_deadline: nil,     # seconds: the app runs under Weft.deadline; past it the client gets 503
        max_request_line: 8192,
        max_header_bytes: 65_536,
        max_headers: 100,
        max_body_bytes: 1 << 30,   # 1 GiB; larger bodies get 413
        spool_threshold: 131_072,  # bodies above this go to a temp file
        access_log: nil,           # nil: none; "-": stdout; a path; or an IO
        quiet: false,
        stats_path: nil,           # e.g. "/weft/stats": JSON statistics served by the server
        metrics_path: nil,         # e.g. "/metrics": Prometheus text format
        control_dir: nil,          # where workers report statistics to the master
        pidfile: nil,
        tag: nil,
        before_fork: [],
        after_worker_boot: [],     # called in the worker with its index, before serving
        before_worker_shutdown: [],
        on_restart: [],
        worker_task: []            # run as a task in each serving process's reactor, given the Server
      }.freeze

      HOOKS = %i[before_fork after_worker_boot before_worker_shutdown on_restart worker_task].freeze

      # Settings checked as they are set, so that a bad value fails at startup in one line:
      # name => [test, what it must be].
      CHECKS = {
        drain_grace: [->(v) { v.is_a?(Numeric) && v >= 0 }, "a number of seconds >= 0"],
        worker_timeout: [->(v) { v.is_a?(Numeric) && v.positive? }, "a positive number of seconds"],
        stall_threshold: [->(v) { v.is_a?(Numeric) && v.positive? }, "a positive number of seconds"],
        request_deadline: [->(v) { v.nil? || (v.is_a?(Numeric) && v.positive? && v.finite?) }, "nil or a positive number of seconds"]
      }.freeze

      attr_reader :options

      # @param options [Hash] settings overriding the defaults
      def initialize(options = {})
        @options = {}
        DEFAULTS.each { |key, value| @options[key] = value.is_a?(Array) ? value.dup : value }
        merge!(options)
      end

      # Reads a Ruby config file; its settings override what is already set.
      # @return [self]
      def load_file(path)
        DSL.new(self).instance_eval(File.read(path), path, 1)
        self
      end

      # @return [self]
      def merge!(options)
        options.each do |key, value|
          key = key.to_sym
          if HOOKS.include?(key) || key == :binds
            @options[key].concat(Array(value))
          else
            self[key] = value
          end
        end
        self
      end

      def [](key)
        @options.fetch(key)
      end

      def []=(key, value)
        raise ArgumentError, "unknown server option #{key.inspect}" unless DEFAULTS.key?(key)
        test, expected = CHECKS[key]
        raise ArgumentError, "#{key} must be #{expected}, got #{value.inspect}" if test && !test.call(value)
        @options[key] = value
      end

      # @return [Integer] the worker count to run; 0 means no master
      def worker_count
        count = @options[:workers]
        count.nil? ? Etc.nprocessors : Integer(count)
      end

      # @return [Array<String>] the bind URLs, with the default when none was given
      def bind_urls
        @options[:binds].empty? ? ["tcp://0.0.0.0:9292"] : @options[:binds].uniq
      end

      # Runs the callbacks registered for a hook.
      def run_hooks(name, *args)
        @options.fetch(name).each { |hook| hook.call(*args) }
      end

      # The methods a config file may call. Each setting is a method of the same name.
      class DSL
        def initialize(config)
          @config = config
        end

        (DEFAULTS.keys - HOOKS - %i[binds]).each do |name|
          define_method(name) { |value| @config[name] = value }
        end

        # Adds a listener: tcp://host:port, unix:///path, ssl://host:port?cert=PATH&key=PATH.
        def bind(url)
          @config[:binds] << url
        end

        # Shorthand for bind "tcp://HOST:PORT".
        def port(number, host = "0.0.0.0")
          bind("tcp://#{host}:#{number}")
        end

        # Sets the Rack app directly (instead of a rackup file).
        def app(rack_app = nil, &block)
          @config[:app] = rack_app || block
        end

        HOOKS.each do |name|
          define_method(name) { |&block| @config[name] << block }
        end
      end
    end
  end
end
