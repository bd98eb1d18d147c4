# frozen_string_literal: true

require "timeout"
require_relative "../../weft"

module Weft
  # The machinery under the resilience layer's public classes (CircuitBreaker, Bulkhead,
  # RetryBudget, Weft.retry, Weft.scatter, Weft.hedge...), which live directly in Weft.
  module Resilience
    # Child tasks whose endings arrive, in the order they end, on a queue their spawner reads:
    # the machinery under Weft.scatter and Weft.hedge, which both wait for "whichever ends
    # next" rather than for one task in particular.
    #
    # Built on public pieces only: each task pushes itself onto a Thread::Queue as the last thing
    # it does (so a wait parks just the reading fiber), and the outcome is read with Task#wait,
    # which also marks a failure as observed so that the reactor does not log it. One reader:
    # the fiber that spawned the tasks.
    # @api private
    class CompletionQueue
      # Raised into the reader when #pop's timeout passes; never escapes #pop.
      class Expired < Exception; end # rubocop:disable Lint/InheritException
      private_constant :Expired

      def initialize
        @ended = Thread::Queue.new
        @keys = {}.compare_by_identity # task => key, until the task's ending has been read
      end

      # Starts a child task of the caller (so it inherits the caller's deadline and is cancelled
      # with it) that calls the block with `args`.
      # @param key [Object] returned by #pop when this task ends
      # @return [Task]
      def spawn(key, *args, name:, &block)
        ended = @ended
        task = Weft.spawn(*args, name: name) do |*task_args|
          block.call(*task_args)
        ensure
          # The task ends right after this without waiting again, so by the time the reader
          # runs, the task is done and its outcome readable.
          ended << Task.current
        end
        @keys[task] = key
        task
      end

      # Waits for the next task to end.
      # @param timeout [Numeric, nil] seconds to wait at most (nil: until one ends)
      # @return [Array(Object, Symbol, Object), nil] the task's key and outcome (see #outcome),
      #   or nil when the timeout passed first
      def pop(timeout = nil)
        task = timeout ? pop_within(timeout) : @ended.pop
        task && read(task)
      end

      # Reads every ending that has arrived, without waiting. A reader that stops reading calls
      # this on its way out, so that no failure is left unobserved (and logged as such).
      # @return [Array<Array(Object, Symbol, Object)>] like #pop's, in the order the tasks ended
      def drain
        entries = []
        entries << read(@ended.pop) until @ended.empty?
        entries
      end

      # Cancels every task whose ending has not been read. With `unwind`, waits one turn of the
      # loop, in which the cancelled tasks run their ensure blocks (those that do not wait end
      # within it); their endings can then be read with #drain.
      # @return [void]
      def cancel(unwind: true)
        cancelled = false
        @keys.each_key { |task| cancelled = true if task.cancel("cancelled: no longer needed") }
        sleep 0 if unwind && cancelled
      end

      private

      def pop_within(seconds)
        return (@ended.pop unless @ended.empty?) unless seconds.positive?
        Timeout.timeout(seconds, Expired) { @ended.pop }
      rescue Expired
        nil
      end

      def read(task)
        [@keys.delete(task), *outcome(task)]
      end

      # @return [Array(Symbol, Object)] [:completed, value], [:failed, exception] or
      #   [:cancelled, Weft::Cancelled]
      def outcome(task)
        value = task.wait
        task.cancelled? ? [:cancelled, task.error] : [:completed, value]
      rescue Exception => e # rubocop:disable Lint/RescueException
        raise unless e.equal?(task.error) # not the task's failure: the reader's own exception
        [:failed, e]
      end
    end
  end
end
