# frozen_string_literal: true

require "optparse"
require_relative "config"
require_relative "../version"

module Weft
  class Server
    # `weft serve [config.ru] [options]` — parses the command line into a Config and runs it.
    class CLI
      USAGE = "Usage: weft serve [RACKUP_FILE] [options]   (weft version, weft help)"

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
          puts parser(Config.new, {}).help
          0
        else
          warn "weft: unknown command #{command.inspect}\n#{USAGE}"
          2
        end
      end

      private

      def serve
        config = Config.new
        cli = {}
        rest = parser(config, cli).parse(@argv)
        config.load_file(cli[:config_file]) if cli[:config_file]
        # Command-line flags win over the config file.
        config[:binds].clear if cli[:binds] && !cli[:binds].empty?
        config.merge!(cli.reject { |key, _| %i[config_file port host].include?(key) })
        config[:rackup] = rest.first if rest.first
        if cli[:port] || cli[:host]
          config[:binds] << "tcp://#{cli[:host] || '0.0.0.0'}:#{cli[:port] || 9292}"
        end
        require_relative "launcher"
        Launcher.new(config, argv: @original).run
        0
      rescue OptionParser::ParseError, ArgumentError => e
        warn "weft: #{e.message}\n#{USAGE}"
        2
      end

      def parser(_config, cli)
        OptionParser.new do |opts|
          opts.banner = USAGE
          opts.on("-p", "--port PORT", Integer, "TCP port (default 9292)") { |v| cli[:port] = v }
          opts.on("-o", "--host HOST", "TCP address (default 0.0.0.0)") { |v| cli[:host] = v }
          opts.on("-b", "--bind URL", "tcp://H:P, unix:///path, ssl://H:P?cert=..&key=.. (repeatable)") do |v|
            (cli[:binds] ||= []) << v
          end
          opts.on("-w", "--workers N", Integer, "worker processes (default: one per CPU; 0 = single process)") { |v| cli[:workers] = v }
          opts.on("-C", "--config FILE", "Ruby config file (weft.rb DSL)") { |v| cli[:config_file] = v }
          opts.on("--preload", "load the app in the master before forking") { cli[:preload] = true }
          opts.on("-E", "--environment ENV", "sets RACK_ENV (and RAILS_ENV/APP_ENV if unset)") { |v| cli[:environment] = v }
          opts.on("--access-log PATH", "access log ('-' for stdout)") { |v| cli[:access_log] = v }
          opts.on("--stats-path PATH", "serve JSON statistics at PATH (e.g. /weft/stats)") { |v| cli[:stats_path] = v }
          opts.on("--metrics-path PATH", "serve Prometheus metrics at PATH (e.g. /metrics)") { |v| cli[:metrics_path] = v }
          opts.on("--max-connections N", Integer, "open connections per process") { |v| cli[:max_connections] = v }
          opts.on("--idle-timeout SEC", Float, "keep-alive idle timeout") { |v| cli[:idle_timeout] = v }
          opts.on("--shutdown-timeout SEC", Float, "graceful stop limit") { |v| cli[:shutdown_timeout] = v }
          opts.on("--drain-grace SEC", Float, "graceful stop: idle keep-alive connections may send one more request this long") do |v|
            cli[:drain_grace] = v
          end
          opts.on("--worker-timeout SEC", Float, "replace a worker whose reactor has not turned this long (default 60)") do |v|
            cli[:worker_timeout] = v
          end
          opts.on("--stall-threshold SEC", Float, "log code that holds the reactor this long (default 1)") { |v| cli[:stall_threshold] = v }
          opts.on("--request-deadline SEC", Float, "run each request under Weft.deadline(SEC); 503 past it") do |v|
            cli[:request_deadline] = v
          end
          opts.on("--pidfile PATH") { |v| cli[:pidfile] = v }
          opts.on("--tag NAME", "shown in worker process titles") { |v| cli[:tag] = v }
          opts.on("-q", "--quiet") { cli[:quiet] = true }
        end
      end
    end
  end
end
