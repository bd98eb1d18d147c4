# frozen_string_literal: true

require_relative "../timers"

module Weft
  module Postgres
    # A timeline of what the pool does for each caller, for finding where a request's time goes
    # (bench/postgres/rails_trace.rb reads it): with WEFT_PG_TRACE=path in the environment, the
    # pools of the process record each statement's way (asked, queued for a slot, submitted on
    # which connection, written, answered, handed back), each lease's (asked, granted, drained
    # for, released) and what a Rack app marks (Trace::Middleware: a request's start and end),
    # and write it to `path` at exit, one event a line:
    #
    #   <monotonic seconds> <fiber id> <event> <connection id or -> <detail or ->
    #
    # Off (the default), each call site costs one constant check. On, an event costs an Array
    # and a clock read; the process keeps them in memory until exit (a few MB for tens of
    # thousands of requests), so it is a tool for runs of seconds, not for production.
    module Trace
      # Where the timeline goes; nil: tracing off.
      PATH = (path = ENV["WEFT_PG_TRACE"]) && !path.empty? ? path : nil
      # Whether events are recorded (constant, so that call sites compile to one check).
      ON = !PATH.nil?

      @events = []

      # Records an event of the calling fiber.
      # @param name [Symbol]
      # @param connection [Object, nil] the connection (or pipeline) concerned, by identity
      # @param detail [Object, nil] one word or number
      # @return [void]
      def self.event(name, connection = nil, detail = nil)
        @events << [Timers.now, Fiber.current.object_id, name, connection&.object_id, detail]
        nil
      end

      # A statement's kind, in one word, for the timeline: `sleep` for pg_sleep, else its first
      # keyword and the table it names first (select:authors, insert:posts).
      # @param sql [String]
      # @return [String]
      def self.tag(sql)
        return "sleep" if sql.include?("pg_sleep")
        verb = sql[/\A\s*(\w+)/, 1].to_s.downcase
        table = sql[/\b(?:from|into|update)\s+"?(\w+)/i, 1]
        table ? "#{verb}:#{table}" : verb
      end

      # Writes the events recorded so far to PATH (appending) and forgets them.
      # @return [void]
      def self.write
        events = @events
        @events = []
        return if events.empty?
        File.open(PATH, "a") do |file|
          events.each do |at, fiber, name, connection, detail|
            file.write(format("%.6f %d %s %s %s\n", at, fiber, name, connection || "-", detail.nil? ? "-" : detail))
          end
        end
        nil
      end

      # Rack middleware that marks each request's start and end on the timeline (the fiber
      # that runs it ties the pool's events to it).
      class Middleware
        # @param app [#call]
        def initialize(app)
          @app = app
        end

        # @return [Array] the app's response
        def call(env)
          Trace.event(:request_start)
          @app.call(env)
        ensure
          Trace.event(:request_end)
        end
      end

      at_exit { write } if ON
    end
  end
end
