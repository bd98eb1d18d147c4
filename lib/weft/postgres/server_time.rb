# frozen_string_literal: true

require_relative "../timers"

module Weft
  module Postgres
    # Telling the server's time from this process's own delay. The pool learns which
    # statements run long (SlowStatements) from how long their answers took; read off the clock
    # when the answer is read, that includes however long this process took to get round to
    # reading it, which under load (a reactor busy with other fibers) is many times what a short
    # statement takes on the server.
    module ServerTime
      module_function

      # For a caller that has just come back from waiting for its socket: the earliest moment
      # the socket can have become ready. Under Weft's reactor, what the reactor knows of it
      # (Scheduler#readiness_floor), nil when it cannot tell; elsewhere (a thread blocked in the
      # wait, another fiber scheduler) the moment now, as the caller was woken when it came.
      # @param since [Float] monotonic time at which the caller began to wait, with no wait
      #   between then and the one it has just come back from
      # @return [Float, nil] monotonic time
      def ready_after(since)
        scheduler = Weft.scheduler
        return Timers.now if scheduler.nil? || Fiber.current.blocking?
        scheduler.readiness_floor(since)
      end
    end
  end
end
