# frozen_string_literal: true

require "optparse"
require_relative "config"
require_relative "listener"
require_relative "../version"

module Weft
  class Server
    # `weft serve [config.ru] [options]` — parses the command line into a Config and runs it.
    class CLI
      USAGE = "Usage: weft serve [RACKUP_FILE] [options]   (weft version, weft help)"

      # @param argv [Array<String>] the command line's arguments
      # @param program [String] the `weft` executable, kept with the arguments so that a hot
      #   restart can exec the same command again
      def initialize(argv, program: $PROGRAM_NAME)
        @argv = argv.dup
        @original = [Gem.ruby, program, *argv]
      end

      # @return [Integer] exit status
      def run
        command = @argv.first&.start_with?("-") ? "serve" : (@argv.shift || "serve")
        case command
        when "serve" then serve
        when "version", "--version"
          puts "weft #{VERSION}"
          0
        when "help", "-h", "--help"
          puts parser({}).help
          0
        else
          warn "weft: unknown command #{command.inspect} (weft help lists the commands)"
          2
        end
      end

      private

      # Builds and checks the whole configuration before anything is bound: a bad value ends
      # the command with one line on stderr naming the option (or file and line) and status 2.
      def serve
        config = configure
        require_relative "launcher"
        Launcher.new(config, argv: @original).run
        0
      rescue OptionParser::ParseError => e
        warn "weft: #{e.message} (weft help lists the options)"
        2
      rescue Config::Invalid => e
        warn "weft: #{e.message}"
        2
      rescue Listener::BindError => e
        warn "weft: #{e.message}"
        1
      end

      # @return [Config] from the flags and the config file (flags win)
      def configure
        config = Config.new
        cli = {}
        rest = parser(cli).parse(@argv)
        raise Config::Invalid, "unexpected argument #{rest[1].inspect} (one rackup file at most)" if rest.size > 1
        config.load_file(cli[:config_file]) if cli[:config_file]
        config[:binds].clear if cli[:binds]
        config.merge!(cli.reject { |key, _| %i[config_file port host].include?(key) })
        config[:rackup] = rest.first if rest.first
        if cli[:port] || cli[:host]
          config.bind(BindAddress.tcp_url(cli[:host] || "0.0.0.0", cli[:port] || BindAddress::DEFAULT_PORT))
        end
        config
      end

      def parser(cli)
        OptionParser.new do |opts|
          opts.banner = USAGE
          opts.on("-p", "--port PORT", Integer, "TCP port (default 9292)") do |v|
            refuse("--port", v, "must be an integer from 0 to 65535") unless BindAddress.port?(v)
            cli[:port] = v
          end
          opts.on("-o", "--host HOST", "TCP address (default 0.0.0.0)") do |v|
            BindAddress.check(BindAddress.tcp_url(v, 0))
            cli[:host] = v
          rescue BindAddress::Invalid => e
            refuse("--host", v, e.reason)
          end
          opts.on("-b", "--bind URL", "tcp://H:P, unix:///path, ssl://H:P?cert=..&key=.. (repeatable)") do |v|
            BindAddress.check(v)
            (cli[:binds] ||= []) << v
          rescue BindAddress::Invalid => e
            refuse("--bind", v, e.reason)
          end
          setting(opts, cli, :workers, "-w", "--workers N", Integer, "worker processes (default: one per CPU; 0 = single process)")
          opts.on("-C", "--config FILE", "Ruby config file (weft.rb DSL)") do |v|
            refuse("--config", v, "no such file") unless File.file?(v)
            refuse("--config", v, "not readable") unless File.readable?(v)
            cli[:config_file] = v
          end
          opts.on("--preload", "load the app in the master before forking") { cli[:preload] = true }
          setting(opts, cli, :environment, "-E", "--environment ENV", "sets RACK_ENV (and RAILS_ENV/APP_ENV if unset)")
          setting(opts, cli, :access_log, "--access-log PATH", "access log ('-' for stdout)")
          setting(opts, cli, :stats_path, "--stats-path PATH", "serve JSON statistics at PATH (e.g. /weft/stats)")
          setting(opts, cli, :metrics_path, "--metrics-path PATH", "serve Prometheus metrics at PATH (e.g. /metrics)")
          setting(opts, cli, :max_connections, "--max-connections N", Integer, "open connections per process")
          setting(opts, cli, :idle_timeout, "--idle-timeout SEC", Float, "keep-alive idle timeout")
          setting(opts, cli, :shutdown_timeout, "--shutdown-timeout SEC", Float, "graceful stop limit")
          setting(opts, cli, :drain_grace, "--drain-grace SEC", Float,
                  "graceful stop: idle keep-alive connections may send one more request this long")
          setting(opts, cli, :worker_timeout, "--worker-timeout SEC", Float,
                  "replace a worker whose reactor has not turned this long (default 60)")
          setting(opts, cli, :worker_heap_free, "--worker-heap-free F", Float,
                  "before a fork the master grows its heap to this fraction free (default 0.4; 0: no)")
          setting(opts, cli, :stall_threshold, "--stall-threshold SEC", Float, "log code that holds the reactor this long (default 1)")
          setting(opts, cli, :request_deadline, "--request-deadline SEC", Float, "run each request under Weft.deadline(SEC); 503 past it")
          setting(opts, cli, :pidfile, "--pidfile PATH")
          setting(opts, cli, :tag, "--tag NAME", "shown in worker process titles")
          opts.on("-q", "--quiet") { cli[:quiet] = true }
        end
      end

      # Defines a flag for a Config setting, checked by the setting's rule as it is parsed.
      def setting(opts, cli, key, *spec)
        flag = spec.grep(/\A--/).first.split.first
        opts.on(*spec) do |value|
          problem = SettingRules.problem(key, value)
          refuse(flag, value, problem) if problem
          cli[key] = value
        end
      end

      def refuse(flag, value, reason)
        shown = value.to_s.match?(/\A[[:graph:]]+\z/) ? value : value.to_s.inspect
        raise Config::Invalid, "#{flag} #{shown}: #{reason}"
      end
    end
  end
end
