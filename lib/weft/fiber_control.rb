# frozen_string_literal: true

module Weft
  # Keeps user code that switches into a fiber the reactor schedules from losing a fiber.
  #
  # Fiber#raise and Fiber#transfer switch to their target at once; the caller runs again only
  # when some fiber switches back to it. Under the reactor none would: a task's fiber, once its
  # exception is handled or its wait cut short, hands the thread to the reactor's loop, which
  # knows nothing of the caller. The caller (and Weft.run with it) would wait forever. So:
  #
  # * Fiber#raise into another task's fiber raises there at once, as Ruby documents, and queues
  #   the caller to go on on the loop's next turn.
  # * Fiber#transfer into a task's fiber or the loop fiber is refused: cutting a task's wait
  #   short would break it, and the loop is not user code. Fiber#raise into the loop fiber or
  #   into an idle pooled fiber (its task has ended) is refused as well. Fiber#kill (Ruby 3.3+)
  #   of a task's fiber is refused: the fiber is pooled, and killing it would end the task
  #   without recording its end. Use Task#cancel, a Queue or a Weft::Promise instead.
  # * Fiber#resume of a task's fiber fails in Ruby itself ("attempt to resume a transferring
  #   fiber"), so it needs nothing here.
  #
  # The reactor's own switches (from the loop fiber) and every fiber that is not the reactor's
  # go straight through.
  module FiberControl
    # Fiber#raise; see the module comment.
    def raise(...)
      scheduler = Fiber.scheduler
      return super unless scheduler.is_a?(Scheduler)
      scheduler.fiber_raise(self) { super(...) }
    end

    # Fiber#transfer; see the module comment.
    def transfer(...)
      scheduler = Fiber.scheduler
      scheduler.check_fiber_transfer(self) if scheduler.is_a?(Scheduler)
      super
    end

    if Fiber.method_defined?(:kill)
      # Fiber#kill (Ruby 3.3+); see the module comment.
      def kill
        scheduler = Fiber.scheduler
        scheduler.check_fiber_kill(self) if scheduler.is_a?(Scheduler)
        super
      end
    end
  end
end

class Fiber
  # @api private: Fiber#transfer as Ruby defines it, for the reactor loop's own switches into
  # tasks. They are the loop's to make, and they are its hot path: FiberControl's check costs
  # about 12% of a Queue hand-off between two tasks, this alias nothing (an UnboundMethod's
  # bind_call about 7%).
  alias_method :weft_transfer, :transfer

  # @api private: the Scheduler::IOTimeout that ends this fiber's timed I/O waits, made once
  # per fiber and reactor (task fibers are pooled) so that a timed wait allocates nothing and
  # arms no timer of its own
  attr_accessor :weft_io_timeout

  # @api private: the Scheduler::SuspendTimeout that ends this fiber's timed suspensions, kept
  # for the same reason
  attr_accessor :weft_suspend_timeout
end

Fiber.prepend(Weft::FiberControl)
