# frozen_string_literal: true

require "stringio"

module Ringpool
  # Serves a Rack app from one Weft reactor on a thread of its own, for servers that are not
  # Weft: Puma's request threads and Falcon's Async fibers hand each request over and wait for
  # the answer, while the app runs as it does under `weft serve` — every request a task of one
  # reactor, the shard's state touched by one thread only, so the app needs no locks of its own.
  #
  #   app = Ringpool::ReactorThread.new(shard.api) { shard.run(url) }   # in config.ru
  #   run app
  #
  # The block, if any, runs as a task of the reactor for as long as the process lives (the
  # shard's peer listener and ownership ticks). The thread starts on first use, or #start; in a
  # forked child a new one starts (a thread does not survive fork).
  #
  # The request body is read in the server's thread before the hand-over (at most `max_body` + 1
  # bytes: the app refuses anything larger, and reading more would only waste memory), because a
  # server's input stream may only be read where it was made (Falcon's belongs to its reactor).
  class ReactorThread
    # @param app [#call] a Rack app
    # @param max_body [Integer] bytes of body handed over at most (+ 1, so the app sees it is too big)
    # @param boot [Proc, nil] run in the reactor, detached, once per process
    def initialize(app, max_body: API::MAX_ALLOCATIONS_BODY, &boot)
      @app = app
      @max_body = max_body
      @boot = boot
      @lock = Thread::Mutex.new
      @pid = nil
    end

    # Starts the reactor thread of this process unless it runs.
    # @return [self]
    def start
      # Every request calls this: the common case, a running thread of this process, takes no lock.
      return self if running?
      @lock.synchronize do
        next if running?
        @pid = Process.pid
        @jobs = Thread::Queue.new
        @thread = Thread.new(@jobs) { |jobs| serve(jobs) }
        @thread.name = "ringpool reactor"
      end
      self
    end

    # @return [Array] the app's Rack response, its body an array of strings
    # @raise whatever the app raised
    def call(env)
      start
      input = env["rack.input"]
      env["rack.input"] = StringIO.new(input ? input.read(@max_body + 1).to_s : +"")
      answer = Weft::Promise.new
      @jobs << [env, answer]
      answer.wait
    end

    private

    def running?
      @pid == Process.pid && @thread&.alive?
    end

    def serve(jobs)
      Weft.run do
        Weft.spawn(detached: true, name: "ringpool boot") { @boot.call } if @boot
        # The job goes in as the task's argument: a block variable would be the next job's by
        # the time the task runs.
        while (job = jobs.pop)
          Weft.spawn(job, detached: true, name: "ringpool request") { |(env, answer)| respond(env, answer) }
        end
      end
    end

    def respond(env, answer)
      status, headers, body = @app.call(env)
      parts = []
      body.each { |part| parts << part }
      body.close if body.respond_to?(:close)
      answer.fulfill([status, headers, parts])
    rescue Exception => e # rubocop:disable Lint/RescueException -- the waiting thread re-raises it
      answer.reject(e)
    end
  end
end
