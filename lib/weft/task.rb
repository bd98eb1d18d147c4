# frozen_string_literal: true

require_relative "errors"
require_relative "deadline"

module Weft
  # A unit of concurrent work: a block running in a fiber of its own under the reactor (fibers
  # are pooled by the scheduler and reused once a task has ended).
  #
  # Created by Weft.spawn. A task starts on the reactor's next turn (a long burst, once a timer
  # is due, over the next turns: see Scheduler#spawn), in spawn order. It ends in one of three
  # states: completed (with a value), failed (with an exception) or cancelled.
  #
  # Tasks form a tree: a task spawned inside another is its child, and cancelling a task
  # cancels its children. When a task ends before its children, they are handed to its parent,
  # so cancelling an ancestor still reaches them.
  #
  # A task inherits the deadline its spawner runs under (see Weft.deadline): when it passes,
  # Weft::DeadlineExceeded is raised where the task waits, as in its spawner.
  class Task
    # Whether this Ruby has inheritable fiber storage (Fiber[], 3.2+).
    STORAGE = Fiber.method_defined?(:storage)
    NO_STORAGE = {}.freeze
    private_constant :STORAGE, :NO_STORAGE

    # The hooks registered with Task.on_end, in registration order.
    END_HOOKS = []
    private_constant :END_HOOKS

    # Registers a block that runs each time a task ends, in the task's own fiber, before anyone
    # waiting for the task hears of it and before the scheduler reuses the fiber for another
    # task. It gets the task (done?, status, error set; Task.current is still the task). For
    # libraries that keep per-fiber resources of their own (ActiveRecord's connection leases,
    # keyed by the Fiber: see Weft::Postgres::ActiveRecordTaskEnd): Weft runs task after task in
    # one pooled fiber, so what a task left with its fiber would pass to the next task there.
    #
    # The block may wait (it runs in a task's fiber under the reactor); the task's deadline no
    # longer applies and the task can no longer be cancelled. An exception it raises is logged
    # (Weft.logger) and does not change the task's outcome. With no hook registered a task's
    # end costs one Array#empty? more.
    # @return [Proc] the block, for Task.remove_end_hook
    def self.on_end(&block)
      raise ArgumentError, "Task.on_end needs a block" unless block
      END_HOOKS << block
      block
    end

    # Unregisters a block registered with Task.on_end.
    # @return [Boolean] whether it was registered
    def self.remove_end_hook(handle)
      !END_HOOKS.delete(handle).nil?
    end

    # The task running the current fiber, or nil outside any task.
    # @return [Task, nil]
    def self.current
      Thread.current[:weft_task] # Thread#[] is fiber-local
    end

    # @return [String, nil] the name given at spawn, used in logs
    attr_reader :name
    # @return [Task, nil]
    attr_reader :parent
    # @return [Fiber, nil] the fiber running the task (nil before it starts and after it ends)
    attr_reader :fiber
    # @return [Symbol] :running, :completed, :failed or :cancelled
    attr_reader :status
    # @return [Deadline, nil] the deadline inherited from the spawner, if any
    attr_reader :deadline

    # @api private: use Weft.spawn
    def initialize(scheduler, parent, name, args, block, deadline = nil)
      @scheduler = scheduler
      @args = args
      @block = block
      @fiber = nil
      @parent = parent
      @name = name
      @status = :running
      @value = nil
      @error = nil
      @children = nil
      @observers = nil
      @observed = false
      @failure_report = nil
      @cancel_requested = false
      @started = false
      @deadline = deadline
      @deadline_timer = nil
      # Made in the spawner's fiber: the copy of its storage this task starts with (Ruby 3.2+).
      @storage = Fiber.current.storage if STORAGE
      parent&.adopt(self)
    end

    # Waits for the task to end.
    # @return the block's value, or nil if the task was cancelled
    # @raise the task's exception, with the task's own backtrace, if it failed
    # @raise [Weft::UsageError] when called from the task itself or outside its reactor
    def wait
      observed!
      wait_until_done unless done?
      raise @error if @status == :failed
      @value
    end

    # Asks the task to stop: Weft::Cancelled is raised in it where it is suspended (at once, if
    # a task cancels itself), so its ensure blocks run. Its children are cancelled too.
    # Cancelling a task that has ended does nothing. May be called from any thread: from another
    # than the reactor's, the reactor's thread cancels the task on its next turn.
    # @return [Boolean] whether a cancellation was requested by this call (from another thread:
    #   whether one may be, as the task had neither ended nor been cancelled yet)
    def cancel(message = "task cancelled")
      return false if done? || @cancel_requested
      unless Thread.current.equal?(@scheduler.thread)
        @scheduler.cancel_from_any_thread(self, message)
        return true
      end
      @cancel_requested = true
      @children&.each_key { |child| child.cancel(message) }
      if Fiber.current.equal?(@fiber)
        raise Cancelled, message
      elsif @started
        @scheduler.raise_later(self, Cancelled.new(message))
      end
      # A task that has not started yet sees the request as it starts (see #execute).
      true
    end

    # @return [Boolean] whether the task has ended (in any state)
    def done?
      @status != :running
    end

    # @return [Boolean] whether the block returned (#value is its value)
    def completed?
      @status == :completed
    end

    # @return [Boolean] whether the block raised (#error is the exception)
    def failed?
      @status == :failed
    end

    # @return [Boolean] whether the task was cancelled before its block finished
    def cancelled?
      @status == :cancelled
    end

    # @return [Exception, nil] the exception a failed task ended with (Weft::Cancelled for a
    #   cancelled one)
    attr_reader :error

    # @return [Array<Task>] the task's children that have not ended
    def children
      @children ? @children.keys : []
    end

    # @return [String] the name (or object id) and status, for logs and the console
    def to_s
      "#<#{self.class.name} #{@name || object_id} #{@status}>"
    end
    alias inspect to_s

    # @api private: calls the block (with this task) once the task has ended, from the fiber
    # that ended it. The block must not block. Returns a handle for #forget_observer.
    def observe(&block)
      observed!
      (@observers ||= []) << block
      block
    end

    # @api private: someone looked at the outcome, so a failure needs no report.
    def observed!
      @observed = true
      @failure_report&.dismiss
    end

    # @api private
    def forget_observer(handle)
      @observers&.delete(handle)
    end

    # @api private
    def adopt(child)
      (@children ||= {}.compare_by_identity)[child] = true
    end

    # @api private
    def disown(child)
      @children&.delete(child)
    end

    # @api private: the scheduler runs the task in the current (pooled) fiber. Never raises,
    # except for process-level signals, which end the reactor.
    def execute
      @started = true
      @fiber = Fiber.current
      Thread.current[:weft_task] = self
      adopt_storage if STORAGE
      raise Cancelled, "task cancelled before it started" if @cancel_requested
      enter_deadline if @deadline
      block = @block
      args = @args
      @block = @args = nil
      value = block.call(*args)
      finish(:completed, value, nil)
    rescue Cancelled => e
      finish(:cancelled, nil, e)
    rescue SystemExit, Interrupt, SignalException
      # Process-level signals are not a task's failure: they end the reactor (Scheduler#run).
      finish(:cancelled, nil, nil)
      raise
    rescue Exception => e # rubocop:disable Lint/RescueException
      finish(:failed, nil, e)
    end

    # @api private: the task's fiber died under it, so it cannot end by itself: Thread#kill of
    # the reactor's thread while the task ran unwinds the fiber (its ensure blocks run) and ends
    # it. The task is recorded as cancelled, so that the reactor, which runs until every task
    # has ended, can close. Task.on_end hooks do not run: they run in the task's fiber.
    def abandon
      @deadline_timer&.cancel
      @status = :cancelled
      @error = Cancelled.new("the task's fiber was killed")
      leave_reactor
    end

    protected

    def reparent(parent)
      @parent = parent
    end

    private

    # Fiber storage (Fiber[], Ruby 3.2+) belongs to the task, not to the pooled fiber running it:
    # what the previous task stored is dropped and the spawner's copy taken, as a new fiber would
    # (Fiber#storage= would do it in one call, but is experimental and warns).
    def adopt_storage
      inherited = @storage || NO_STORAGE # a fiber that never stored anything has nil
      @storage = nil
      Fiber.current.storage&.each_key { |key| Fiber[key] = nil unless inherited.key?(key) }
      inherited.each { |key, value| Fiber[key] = value }
    end

    def finish(status, value, error)
      @deadline_timer&.cancel
      @status = status
      @value = value
      @error = error
      run_end_hooks unless END_HOOKS.empty?
      leave_reactor
      report_if_never_observed if status == :failed && !@observed
    end

    # Tells the reactor, the task tree and the observers that the task has ended.
    def leave_reactor
      @fiber = nil # the fiber goes back to the scheduler's pool
      @scheduler.task_ended(self)
      hand_children_to_parent
      @observers&.each { |observer| observer.call(self) }
    end

    # Runs the Task.on_end hooks: after the status is set, so that they see the outcome and the
    # task can no longer be cancelled, and before the observers, so that whoever waits for the
    # task finds what the hooks gave back given back.
    def run_end_hooks
      END_HOOKS.each do |hook|
        hook.call(self)
      rescue StandardError => e
        Weft.logger.error((["task end hook failed for task #{@name || object_id}: #{e.class}: #{e.message}"] +
          (e.backtrace || [])).join("\n\t"))
      end
    end

    # Makes the inherited deadline the fiber's current one and arms the timer that raises
    # DeadlineExceeded into the task when it passes. The timer fires in the loop fiber, so the
    # task is always suspended at that moment, parked in whatever wait it was in.
    def enter_deadline
      Deadline.current = @deadline
      fiber = @fiber
      @deadline_timer = @scheduler.timers.after(@deadline.remaining) do
        # A task being cancelled is unwinding already; a second exception would cut its ensure
        # blocks short and make the cancellation look like a failure.
        fiber.raise(DeadlineExceeded, @deadline.message) unless done? || @cancel_requested
      end
    end

    def hand_children_to_parent
      @parent&.disown(self)
      return unless @children
      @children.each_key do |child|
        child.reparent(@parent)
        @parent&.adopt(child)
      end
      @children = nil
    end

    # A failure counts as unobserved only once nobody can observe it any more: when the task
    # object is garbage collected, or when its reactor closes. Judging earlier (say, at the end of
    # the failing turn) would log failures that the spawner is about to wait for, since spawning
    # other tasks first gives the loop a turn.
    def report_if_never_observed
      @failure_report = UnobservedFailure.new(@scheduler, self)
      @scheduler.track_unobserved(@failure_report)
      ObjectSpace.define_finalizer(self, @failure_report)
    end

    def wait_until_done
      current = Fiber.current
      raise UsageError, "a task cannot wait for itself" if current.equal?(@fiber) || Task.current.equal?(self)
      unless Fiber.scheduler.equal?(@scheduler) && !current.blocking?
        raise UsageError, "Task#wait must be called from a task in the same reactor (inside Weft.run)"
      end

      handle = observe { @scheduler.wake(current, true, self) }
      begin
        @scheduler.suspend(nil, self) until done?
      ensure
        forget_observer(handle)
      end
    end
  end

  # The log line for a task failure that nobody observed, written at most once: from the task's
  # finalizer or when the reactor closes, whichever comes first. It holds the description, never
  # the task, so that the task can be collected.
  class UnobservedFailure
    # @param scheduler [Scheduler] the reactor that forgets the report once it is written
    # @param task [Task] the failed task; only its name and error are kept
    def initialize(scheduler, task)
      @scheduler = scheduler
      error = task.error
      @text = (["task #{task.name || task.object_id} failed and nothing waited for it: #{error.class}: #{error.message}"] +
        (error.backtrace || [])).join("\n\t")
      @done = false
    end

    # Writes the report unless it was written or dismissed already. Also the finalizer.
    def call(_object_id = nil)
      return if @done
      @done = true
      @scheduler.forget_unobserved(self)
      Weft.logger.error(@text)
    end

    # The failure was observed after all: no report.
    def dismiss
      return if @done
      @done = true
      @scheduler.forget_unobserved(self)
    end
  end
end
