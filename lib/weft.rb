# frozen_string_literal: true

require "logger"
require_relative "weft/version"
require_relative "weft/errors"
require_relative "weft/timers"
require_relative "weft/deadline"
require_relative "weft/task"
require_relative "weft/scheduler"
require_relative "weft/gather"
require_relative "weft/semaphore"
require_relative "weft/promise"
require_relative "weft/mutex_sleep_fix"

# Weft runs ordinary blocking Ruby code concurrently under Ruby's Fiber::Scheduler.
#
#   Weft.run do
#     a = Weft.spawn { Net::HTTP.get(URI("http://example.com/a")) }
#     b = Weft.spawn { db.exec("select pg_sleep(1)") }
#     Weft.gather([a, b])
#   end
#
# See docs/core.md for the model and how each stdlib operation behaves.
module Weft
  # The shortest limit Weft hands the stdlib's Timeout, which treats 0 as no limit at all.
  MINIMUM_TIMEOUT = 1e-6
  private_constant :MINIMUM_TIMEOUT

  class << self
    # Where Weft reports what nobody else would see (a task's failure nobody waited for).
    # @return [Logger]
    attr_writer :logger

    # @return [Logger] where Weft reports what no caller can be told (a task failure nothing
    #   waited for, a hook that raised): $stderr unless set with Weft.logger=
    def logger
      @logger ||= Logger.new($stderr, progname: "weft")
    end

    # Runs the block in a task under a new reactor on this thread and returns its value (or
    # raises its exception) once it and every task spawned inside have ended. Called inside a
    # running reactor, it simply runs the block.
    def run(&block)
      raise ArgumentError, "Weft.run needs a block" unless block
      current = Fiber.scheduler
      return yield if current.is_a?(Scheduler) && !Fiber.current.blocking?
      raise UsageError, "this thread already has a fiber scheduler (#{current.class})" if current

      scheduler = Scheduler.new
      Fiber.set_scheduler(scheduler)
      ran = false
      begin
        root = scheduler.spawn(nil, "root", [], block, Deadline.current)
        root.observe {} # its failure is raised from here, not logged
        scheduler.run
        ran = true
        root.wait
      ensure
        # Thread#kill of this thread ends the loop with no exception for Scheduler#run to
        # rescue: the tasks are cancelled here, as for an Interrupt, or closing the scheduler
        # would run them to their natural end (a server's accept loop: never) before the thread
        # could die.
        scheduler.cancel_all unless ran
        Fiber.set_scheduler(nil)
      end
    end

    # Creates a task running the block (given `args`) and returns it at once. The task starts on
    # the reactor's next turn (a long burst, once a timer is due, over the next turns: see
    # Scheduler#spawn), in spawn order, as a child of the current task — or, with
    # `detached: true`, as a task of its own that cancelling the spawner does not reach (a
    # server's connections, say, which must outlive the accept loop that spawned them).
    # @return [Task]
    def spawn(*args, name: nil, detached: false, &block)
      raise ArgumentError, "Weft.spawn needs a block" unless block
      scheduler!("Weft.spawn").spawn(detached ? nil : Task.current, name, args, block)
    end

    # Runs the block with a deadline; past it, Weft::TimeoutError (a Timeout::Error) is raised
    # where the block is waiting. Outside a reactor it falls back to the stdlib's thread-based
    # Timeout with the same error class, and the same durations mean the same in both places:
    # nil or Float::INFINITY is no limit, zero or less a deadline already past (a computed
    # `deadline - now` that ran out), which the stdlib would take as none (0) or refuse (< 0).
    # @raise [ArgumentError] for NaN or anything that is not a real number
    def timeout(seconds, message = nil, &block)
      return yield(seconds) if seconds.nil? || seconds == Float::INFINITY
      unless seconds.is_a?(Numeric) && seconds.real? && !(seconds.is_a?(Float) && seconds.nan?)
        raise ArgumentError, "Weft.timeout needs a number of seconds or nil (got #{seconds.inspect})"
      end

      message ||= "execution expired after #{seconds}s"
      scheduler = Fiber.scheduler
      if scheduler.is_a?(Scheduler) && !Fiber.current.blocking?
        scheduler.timeout_after(seconds, TimeoutError, message, &block)
      else
        Timeout.timeout([seconds, MINIMUM_TIMEOUT].max, TimeoutError, message, &block)
      end
    end

    # Runs the block under a deadline `seconds` from now that reaches every wait inside it: past
    # it, Weft::DeadlineExceeded (a Weft::TimeoutError) is raised where the block waits, and in
    # every task spawned inside the block that is still waiting (tasks inherit the deadline).
    # Nested deadlines take the earlier, so an inner `Weft.deadline(10)` cannot extend an outer
    # one of 1 s. Weft's own waits (pool checkouts, the HTTP client, the PostgreSQL pool, which
    # also cancels a running statement on the server) read what is left from Weft.remaining.
    #
    #   Weft.deadline(0.2) do
    #     users = Weft.spawn { api.get("/users").body }   # bounded by the same 0.2 s
    #     DB.query("select ...")                           # and so is this
    #     users.wait
    #   end
    #
    # Outside a reactor the deadline is still visible to Weft.remaining and the clients, and the
    # stdlib's thread-based Timeout enforces it on the block.
    # @param seconds [Numeric, nil] from now; nil runs the block under the current deadline only
    # @yieldparam deadline [Deadline] the deadline in force inside the block
    # @return the block's value
    # @raise [ArgumentError] for a negative or non-finite number of seconds
    def deadline(seconds, &block)
      raise ArgumentError, "Weft.deadline needs a block" unless block
      outer = Deadline.current
      mine = seconds.nil? ? outer : Deadline.earliest(Deadline.after(seconds), outer)
      # The outer deadline (or none) stays in force, enforced by whoever set it.
      return yield(outer) if mine.equal?(outer)

      Deadline.current = mine
      begin
        scheduler = Fiber.scheduler
        if scheduler.is_a?(Scheduler) && !Fiber.current.blocking?
          scheduler.timeout_after(mine.remaining, DeadlineExceeded, mine.message) { yield mine }
        else
          # The stdlib's Timeout takes 0 to mean "no limit": an expired deadline must still
          # interrupt the block, as soon as it can.
          Timeout.timeout([mine.remaining, MINIMUM_TIMEOUT].max, DeadlineExceeded, mine.message) { yield mine }
        end
      ensure
        Deadline.current = outer
      end
    end

    # @return [Float, nil] seconds left until the current deadline (never negative), nil when
    #   the caller runs under none
    def remaining
      Deadline.current&.remaining
    end

    # Waits for tasks and returns their values in order; see Gather.gather.
    def gather(*tasks, collect: false)
      Gather.gather(tasks.flatten, collect: collect)
    end

    # Calls the block for each item in tasks, at most `concurrency` at a time (all at once when
    # nil), and returns the results in order. The first failure cancels the rest and is raised.
    # @raise [ArgumentError] unless `concurrency` is nil or a positive Integer
    def map(items, concurrency: nil, &block)
      unless concurrency.nil? || (concurrency.is_a?(Integer) && concurrency.positive?)
        raise ArgumentError, "Weft.map needs a positive Integer concurrency, or nil (got #{concurrency.inspect})"
      end

      items = items.to_a
      workers = [concurrency || items.size, items.size].min
      results = Array.new(items.size)
      next_index = 0
      tasks = Array.new(workers) do
        spawn(name: "Weft.map worker") do
          while (index = next_index) < items.size
            next_index += 1
            results[index] = block.call(items[index])
          end
        end
      end
      gather(tasks)
      results
    end

    # @return [Scheduler, nil] the reactor running on this thread
    def scheduler
      current = Fiber.scheduler
      current if current.is_a?(Scheduler)
    end

    # @return [Boolean] whether the caller runs in a task inside a Weft reactor
    def running?
      !scheduler.nil? && !Fiber.current.blocking?
    end

    # @api private
    # @return [Scheduler] the running reactor, or raises a clear error naming `what`
    def scheduler!(what)
      current = scheduler
      return current if current && !Fiber.current.blocking?
      raise UsageError, "#{what} must be called inside Weft.run (no Weft reactor is running on this fiber)"
    end
  end
end
