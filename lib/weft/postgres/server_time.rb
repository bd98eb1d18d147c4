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

      # The earliest moment the answer the caller has just read (after waiting for its socket)
      # can have arrived: under Weft's reactor, what the reactor knows of when the socket became
      # readable (Scheduler#readiness_floor); elsewhere (a thread blocked in the wait, another
      # fiber scheduler) the moment now, as the caller was woken as soon as it came.
      # @param since [Float] monotonic time at which the caller last found its answer not in,
      #   with no wait between then and the wait it has just come back from
      # @return [Float] monotonic time, no earlier than `since`
      def answered_after(since)
        scheduler = Weft.scheduler
        return Timers.now if scheduler.nil? || Fiber.current.blocking?
        scheduler.readiness_floor(since)
      end
    end
  end
end
