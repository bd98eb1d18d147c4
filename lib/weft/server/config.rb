# frozen_string_literal: true

require "etc"
require_relative "setting_rules"
require_relative "../errors"

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
    #   warmup { |warm| warm.get("/health") }
    class Config
      # A setting the server cannot use, or a config file that cannot be loaded. The message is
      # one line naming the setting (and the file and line, for a config file).
      class Invalid < ArgumentError
        include Weft::Error
      end

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
        spread_connections: true,  # cluster: a worker well above a sibling's open connections leaves new ones to it
        max_connections: 10_000,   # per process; accept waits while this many are open
        max_requests_per_connection: 10_000,
        first_data_timeout: 30,    # a new connection's first request head must start this soon
        header_timeout: 10,        # from a request's first byte to its complete head
        body_timeout: 30,          # at most this long waiting for any one read of a body
        body_min_rate: 500,        # bytes/s a body must average past its first body_timeout; nil: no minimum
        linger: 0.05,              # a kept-alive connection keeps its fiber this long (+ <= 10 ms) before parking
        idle_timeout: 20,          # keep-alive connection with no request in progress
        write_timeout: 30,         # at most this long waiting for the client to take any output
        shutdown_timeout: 30,      # graceful stop: in-flight requests get this long
        drain_grace: 1,            # graceful stop: a connection idle for less may send one more request
        worker_boot_timeout: 60,   # a worker that does not report booting is replaced
        worker_timeout: 60,        # a worker whose reactor has not turned for this long is replaced
        worker_heap_free: 0.4,     # before a fork the master grows its heap to this fraction free (ForkHeap); 0: no
        stall_threshold: 1,        # code holding the reactor this long is logged with its backtrace
        request_deadline: nil,     # seconds: the app runs under Weft.deadline; past it the client gets 503
        max_request_line: 8192,
        max_header_bytes: 65_536,
        partial_head_budget: 64 << 20, # bytes of unfinished heads a process keeps parked; past it big ones go (431)
        max_headers: 100,
        max_body_bytes: 1 << 30,   # 1 GiB; larger bodies get 413
        spool_threshold: 131_072,  # bodies above this go to a temp file
        error_summary_interval: 10, # a repeating error is logged in full once, then counted (ErrorLog)
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
        worker_task: [],           # run as a task in each serving process's reactor, given the Server
        warmup: []                 # cluster with preload: run in the master before forking, given a Warmup
      }.freeze

      HOOKS = %i[before_fork after_worker_boot before_worker_shutdown on_restart worker_task warmup].freeze

      # @return [Hash{Symbol => Object}] every setting, defaults filled in
      attr_reader :options

      # @param options [Hash] settings overriding the defaults
      def initialize(options = {})
        @options = {}
        DEFAULTS.each { |key, value| @options[key] = value.is_a?(Array) ? value.dup : value }
        merge!(options)
      end

      # Reads a Ruby config file; its settings override what is already set.
      # @return [self]
      # @raise [Invalid] naming the file and line of the first bad setting, or of whatever else
      #   went wrong evaluating it (syntax error, unknown setting, an exception)
      def load_file(path)
        source = begin
          File.read(path)
        rescue SystemCallError => e
          raise Invalid, "config file #{path}: #{e.message}"
        end
        begin
          DSL.new(self).instance_eval(source, path, 1)
        rescue StandardError, ScriptError => e
          raise Invalid, "#{location_in(path, e)}#{config_file_message(e)}"
        end
        self
      end

      # Sets several settings (binds and hooks are added to, the others replaced).
      # @return [self]
      # @raise [Invalid] for an unknown setting or a value it does not accept
      def merge!(options)
        options.each do |key, value|
          key = key.to_sym
          if HOOKS.include?(key) || key == :binds
            value = Array(value)
            self.class.check(key, value)
            @options[key].concat(value)
          else
            self[key] = value
          end
        end
        self
      end

      # @param key [Symbol] a setting's name
      # @return [Object] its value
      # @raise [KeyError] for a name that is not a setting
      def [](key)
        @options.fetch(key)
      end

      # @raise [Invalid] for an unknown setting or a value it does not accept
      def []=(key, value)
        self.class.check(key, value)
        @options[key] = value.is_a?(Array) && key == :binds ? value.dup : value
      end

      # Adds a listener URL. @raise [Invalid] when it cannot be bound (bad syntax or port,
      #   unknown host, missing certificate...)
      # @return [self]
      def bind(url)
        merge!(binds: [url])
      end

      # @raise [Invalid] unless `value` is acceptable for the setting `key`
      # @return [void]
      def self.check(key, value)
        raise Invalid, "unknown server option #{key.inspect}" unless DEFAULTS.key?(key)
        problem = SettingRules.problem(key, value)
        return unless problem
        raise Invalid, key == :binds ? "binds #{problem}" : "#{key} #{value.inspect}: #{problem}"
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

      private

      # "weft.rb:3: " for the innermost frame of the config file in the error's backtrace (a
      # SyntaxError carries it in its message instead).
      def location_in(path, error)
        return "" if error.is_a?(SyntaxError)
        frame = (error.backtrace_locations || []).find { |location| location.path == path }
        frame ? "#{path}:#{frame.lineno}: " : "#{path}: "
      end

      def config_file_message(error)
        message = error.message.lines.first.to_s.chomp
        case error
        when Invalid then message
        when NoMethodError, NameError
          error.receiver.is_a?(DSL) ? "unknown setting #{error.name}" : message
        else "#{message} (#{error.class})"
        end
      rescue ArgumentError # NameError#receiver when there is none
        message
      end

      # The methods a config file may call. Each setting is a method of the same name.
      class DSL
        # @param config [Config] the configuration the file's calls set
        def initialize(config)
          @config = config
        end

        (DEFAULTS.keys - HOOKS - %i[binds]).each do |name|
          define_method(name) { |value| @config[name] = value }
        end

        # Adds a listener: tcp://host:port, unix:///path, ssl://host:port?cert=PATH&key=PATH.
        def bind(url)
          @config.bind(url)
        end

        # Shorthand for bind "tcp://HOST:PORT".
        def port(number, host = "0.0.0.0")
          raise Invalid, "port #{number.inspect}: must be an integer from 0 to 65535" unless BindAddress.port?(number)
          bind(BindAddress.tcp_url(host, number))
        end

        # Sets the Rack app directly (instead of a rackup file).
        def app(rack_app = nil, &block)
          @config[:app] = rack_app || block
        end

        HOOKS.each do |name|
          define_method(name) do |&block|
            raise Invalid, "#{name}: needs a block" unless block
            @config.merge!(name => [block])
          end
        end
      end
    end
  end
end
