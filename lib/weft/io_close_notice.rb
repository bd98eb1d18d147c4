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
  #
  # Closed on another thread, an IO a reactor's fiber waits on made Ruby raise its own IOError
  # into whatever fiber that reactor ran next (ending Weft.run), or went unnoticed: such a close
  # is done on the reactor's thread instead (Scheduler#close_from_any_thread), and the closing
  # thread waits for it.
  module IOCloseNotice
    # IO#close; see the module comment.
    def close
      scheduler = Fiber.scheduler
      scheduler = nil unless scheduler.is_a?(Scheduler)
      if (elsewhere = Scheduler.waiting_elsewhere(self, scheduler)) &&
         (outcome = elsewhere.close_from_any_thread(self))
        failure = outcome.pop
        raise failure if failure

        return nil
      end
      scheduler ? scheduler.io_closing(self) { super } : super
    end
  end
end

IO.prepend(Weft::IOCloseNotice)
