# frozen_string_literal: true

module Weft
  # Lets IO#close reach the fibers that wait on the IO, as it reaches threads.
  #
  # A thread blocked reading an IO that another thread closes gets IOError ("stream closed in
  # another thread"). A fiber waiting under a Fiber::Scheduler is parked in the selector
  # instead, and closing the descriptor takes it out of epoll without an event: before Ruby 3.5
  # (whose IO#close calls Fiber::Scheduler#fiber_interrupt) such a fiber waited forever, and so
  # did Weft.run. Closing a socket from another task to stop the task reading it is common
  # enough (a WebSocket's writer that is done, a shutdown), so IO#close tells the reactor, which
  # raises IOError into the fibers waiting on the IO through Scheduler#io_wait (see
  # Scheduler#io_closing). Waits that bypass #io_wait (the server's coarse waits, Readiness)
  # are their owners' to end.
  module IOCloseNotice
    # IO#close; see the module comment.
    def close
      scheduler = Fiber.scheduler
      return super unless scheduler.is_a?(Scheduler)
      scheduler.io_closing(self) { super }
    end
  end
end

IO.prepend(Weft::IOCloseNotice)
