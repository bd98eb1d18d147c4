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

      # The shortest a segment of pipelined statements can have taken on the server: from the
      # latest it can have started (Pipeline#segment_start) to the earliest its sync point can
      # have arrived (Pipeline#wait_and_read), or 0 where the second comes before the first.
      # Then the pool cannot tell the time at all, and that is why:
      # - the segment's sync point came in the same read as the one before it (a reader that
      #   got round late): the segment counts as started when that read ended, the latest the
      #   segment before can have ended, which is after the floor of the read that brought both;
      # - the segment was written after the floor: by the reader itself on its way to the read
      #   (its end-of-turn flush still to come), the server answering before it read; or by the
      #   end-of-turn flush after a poll, read in a poll that did not block, so that the floor
      #   is that earlier poll's look, or the read before when the reactor cannot tell.
      # An answer comes after its question: where its floor does not, the segment can have
      # taken anything from nothing up to the read, and nothing is the bound. The difference was
      # given as it came before (negative in 30-70% of the segments of 100 fibers over 4
      # connections, down to -57 ms beside other processes), which the pool took as quick.
      # @param arrived_after [Float] monotonic time after which the sync point arrived
      # @param started [Float] monotonic time the server can have started at the latest
      # @return [Float] seconds, never negative
      def segment_time(arrived_after, started)
        took = arrived_after - started
        took > 0.0 ? took : 0.0
      end
    end
  end
end
