# frozen_string_literal: true

require_relative "bind_address"
require_relative "fork_heap"

module Weft
  class Server
    # What each server setting accepts. Config checks every value as it is set (constructor
    # options, the weft.rb DSL, command-line flags), so that a bad value is reported in one line
    # naming the setting before the server binds or forks anything — instead of a backtrace, or
    # a value the server would quietly misuse (`workers -1`, `max_connections 0`).
    module SettingRules
      # A named condition on a value.
      Rule = Struct.new(:expected, :test) do
        # @return [String, nil] why `value` is refused, or nil when it is fine
        def problem(value)
          "must be #{expected}" unless test.call(value)
        end
      end

      # A rule whose refusal reason depends on the value (bind URLs, files).
      Custom = Struct.new(:check) do
        # @return [String, nil] why `value` is refused, or nil when it is fine
        def problem(value)
          check.call(value)
        end
      end

      class << self
        # @return [String, nil] why `value` cannot be the setting `name`, or nil when it can
        #   (also for a setting without a rule: test/server/config_test.rb makes sure there is none)
        def problem(name, value)
          RULES[name]&.problem(value)
        end

        private

        def integer(min, max = nil)
          expected = max ? "an integer from #{min} to #{max}" : "an integer of at least #{min}"
          Rule.new(expected, ->(value) { value.is_a?(Integer) && value >= min && (max.nil? || value <= max) })
        end

        # Seconds: a finite number, above zero unless `zero` is allowed.
        def seconds(zero: false)
          Rule.new(zero ? "a number of seconds of at least 0" : "a number of seconds above 0",
                   lambda do |value|
                     value.is_a?(Numeric) && value.real? && value.finite? && (zero ? value >= 0 : value.positive?)
                   end)
        end

        # A number from 0 to `max`.
        def fraction(max)
          Rule.new("a fraction from 0 to #{max}",
                   ->(value) { value.is_a?(Numeric) && value.real? && value.finite? && value >= 0 && value <= max })
        end

        def boolean
          Rule.new("true or false", ->(value) { value == true || value == false })
        end

        def optional(rule)
          Custom.new(->(value) { rule.problem(value) unless value.nil? })
        end

        def text(expected = "a non-empty string without control characters", pattern = /\A[^[:cntrl:]]+\z/)
          Rule.new(expected, ->(value) { value.is_a?(String) && pattern.match?(value) })
        end

        # A file the server will create: its directory must exist already.
        def new_file
          Custom.new(lambda do |value|
            problem = text("a file name").problem(value)
            next problem if problem
            directory = File.dirname(File.expand_path(value))
            "directory #{directory} does not exist" unless File.directory?(directory)
          end)
        end

        def callables
          Custom.new(lambda do |value|
            "must be a block" unless value.is_a?(Array) && value.all? { |hook| hook.respond_to?(:call) }
          end)
        end
      end

      # H1_MAX_LIMIT and the head parser's header-count cap (ext/weft_http1).
      PARSER_LIMIT = 16 * 1024 * 1024
      MAX_HEADERS = 1000
      # A typo like `-w 1000` should not fork a thousand processes.
      MAX_WORKERS = 1024

      # setting => rule. Every key of Config::DEFAULTS has one (a test checks).
      RULES = {
        binds: Custom.new(lambda do |urls|
          next "must be a list of bind URLs" unless urls.is_a?(Array)
          urls.each { |url| BindAddress.check(url) }
          nil
        rescue BindAddress::Invalid => e
          "has #{e.url.inspect}: #{e.reason}"
        end),
        rackup: text("a file name"),
        app: Custom.new(->(value) { "must respond to call" unless value.nil? || value.respond_to?(:call) }),
        environment: optional(text("a non-empty name", /\A[[:graph:]]+\z/)),
        workers: optional(integer(0, MAX_WORKERS)),
        preload: boolean,
        backlog: integer(1, 65_535),
        reuse_port: boolean,
        spread_connections: boolean,
        max_connections: integer(1),
        max_requests_per_connection: integer(1),
        first_data_timeout: seconds,
        header_timeout: seconds,
        body_timeout: seconds,
        body_min_rate: optional(integer(1)),
        linger: optional(seconds(zero: true)),
        idle_timeout: seconds,
        write_timeout: seconds,
        shutdown_timeout: seconds(zero: true),
        worker_boot_timeout: seconds,
        max_request_line: integer(1, PARSER_LIMIT),
        max_header_bytes: integer(1, PARSER_LIMIT),
        partial_head_budget: optional(integer(1)),
        max_headers: integer(1, MAX_HEADERS),
        max_body_bytes: integer(0),
        spool_threshold: integer(0),
        error_summary_interval: seconds,
        drain_grace: seconds(zero: true),
        worker_timeout: seconds,
        worker_heap_free: optional(fraction(ForkHeap::MAX_FREE)),
        stall_threshold: seconds,
        request_deadline: optional(seconds),
        access_log: Custom.new(lambda do |value|
          next if value.nil? || value == false || value == "-" || (!value.is_a?(String) && value.respond_to?(:write))
          new_file.problem(value)
        end),
        quiet: boolean,
        stats_path: optional(text("a path starting with /", %r{\A/[[:graph:]]*\z})),
        metrics_path: optional(text("a path starting with /", %r{\A/[[:graph:]]*\z})),
        control_dir: optional(text("a directory name")),
        pidfile: optional(new_file),
        tag: optional(text),
        before_fork: callables,
        after_worker_boot: callables,
        before_worker_shutdown: callables,
        on_restart: callables,
        worker_task: callables,
        warmup: callables
      }.freeze
    end
  end
end
