# frozen_string_literal: true

require_relative "errors"

module Weft
  # Scatter-gather: wait for a set of tasks together.
  module Gather
    module_function

    # Waits for every task and returns their values in the order given: nil for a task that was
    # cancelled, as Task#wait returns.
    #
    # By default the first failure wins: as soon as any task fails, the others still running are
    # cancelled and that failure is raised (with its own backtrace) at once, without waiting for
    # them to unwind: their ensure blocks run on the reactor's next turns. With `collect: true` every
    # task is waited for and the result holds each value, or the exception a task failed with
    # (a Weft::Cancelled for a task that was cancelled).
    #
    # @param tasks [Array<Task>]
    # @return [Array]
    def gather(tasks, collect: false)
      scheduler = Weft.scheduler!("Weft.gather")
      waiter = Fiber.current
      remaining = tasks.count { |task| !task.done? }
      first_failure = collect ? nil : tasks.find(&:failed?)
      handles = {}.compare_by_identity
      on_end = proc do |task|
        remaining -= 1
        first_failure ||= task if !collect && task.failed?
        scheduler.wake(waiter, true, handles) if remaining.zero? || first_failure
      end
      begin
        tasks.each { |task| task.done? ? task.observe {} : handles[task] = task.observe(&on_end) }
        scheduler.suspend(nil, handles) until remaining.zero? || first_failure
      ensure
        handles.each { |task, handle| task.forget_observer(handle) }
      end

      if first_failure
        tasks.each(&:cancel)
        raise first_failure.error
      end
      return tasks.map(&:wait) unless collect # no task failed: each completed or was cancelled
      tasks.map { |task| task.completed? ? task.wait : task.error }
    end
  end
end
