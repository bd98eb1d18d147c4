# frozen_string_literal: true

require_relative "launcher"

module Weft
  class Server
    # What `rackup -s weft` and `rails server -u weft` call, through the thin adapters in
    # lib/rackup/handler/weft.rb (rackup 2) and lib/rack/handler/weft.rb (Rack 2).
    #
    # Runs a single process by default, like other servers under rackup; WEFT_WORKERS=N or a
    # config file (config/weft.rb, or WEFT_CONFIG) can ask for a cluster.
    module RackHandler
      DEFAULT_OPTIONS = { Host: "0.0.0.0", Port: 9292 }.freeze

      module_function

      # @param app [#call]
      # @param options [Hash] rackup's options (:Host, :Port, :environment, :config...)
      def run(app, **options)
        config = Config.new
        file = ENV["WEFT_CONFIG"] || ("config/weft.rb" if File.exist?("config/weft.rb"))
        config.load_file(file) if file
        config[:app] = app
        config[:workers] = workers_from_env(config[:workers])
        config[:preload] = true # the app is already loaded
        if options[:Port] || config[:binds].empty?
          config[:binds].clear
          config.bind(BindAddress.tcp_url(options[:Host] || DEFAULT_OPTIONS[:Host], Integer(options[:Port] || DEFAULT_OPTIONS[:Port])))
        end
        config[:environment] = options[:environment] if options[:environment]
        yield config if block_given?
        Launcher.new(config).run
      end

      # WEFT_WORKERS when set, else the configured count, else a single process.
      def workers_from_env(configured)
        value = ENV.fetch("WEFT_WORKERS") { return configured || 0 }
        Integer(value, 10)
      rescue ArgumentError
        raise Config::Invalid, "WEFT_WORKERS #{value.inspect}: must be an integer"
      end

      # Options rackup lists in its --help.
      def valid_options
        {
          "Host=HOST" => "Hostname to listen on (default: 0.0.0.0)",
          "Port=PORT" => "Port to listen on (default: 9292)"
        }
      end
    end
  end
end
