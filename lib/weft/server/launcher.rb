# frozen_string_literal: true

require_relative "../server"
require_relative "cluster"

module Weft
  class Server
    # Starts a configured server the way the CLI and the rackup handler want it: a single
    # process when `workers` is 0, else a Cluster; loads the app from its rackup file.
    class Launcher
      # @param config [Config]
      # @param argv [Array<String>, nil] the command line to re-exec on a hot restart
      def initialize(config, argv: nil)
        @config = config
        @argv = argv
      end

      # Runs until stopped by a signal. @return [void]
      def run
        apply_environment
        unless @config[:app] || File.exist?(@config[:rackup])
          raise Config::Invalid, "no Rack app: #{@config[:rackup]} not found"
        end
        if @config.worker_count.zero?
          run_single
        else
          Cluster.new(@config, method(:load_app), argv: @argv).run
        end
      end

      # @return [#call] the Rack app from config[:app] or the rackup file
      def load_app
        return @config[:app] if @config[:app]
        path = @config[:rackup]
        raise ArgumentError, "no Rack app: #{path} not found" unless File.exist?(path)
        app = Rack::Builder.parse_file(path)
        app.is_a?(Array) ? app.first : app # Rack 2 returns [app, options]
      end

      private

      def run_single
        app = load_app
        server = Server.new(app, @config)
        Server.trap_stop_signals { server.stop }
        File.write(@config[:pidfile], "#{Process.pid}\n") if @config[:pidfile]
        Weft.logger.info("weft #{VERSION} (single process #{Process.pid}) listening on #{server.bound_urls.join(', ')}") unless @config[:quiet]
        @config.run_hooks(:after_worker_boot, 0)
        server.run
      ensure
        File.unlink(@config[:pidfile]) if @config[:pidfile] && File.exist?(@config[:pidfile])
      end

      def apply_environment
        environment = @config[:environment]
        return unless environment
        ENV["RACK_ENV"] = environment
        ENV["RAILS_ENV"] ||= environment
        ENV["APP_ENV"] ||= environment
      end
    end
  end
end
