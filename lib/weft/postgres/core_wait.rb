# frozen_string_literal: true

require_relative "../timers"
require_relative "../thread_statistics"

module Weft
  module Postgres
    # How much of the latest moments this thread spent waiting for a core: the machine's load as
    # the operating system saw it (Linux's per-thread scheduler statistics, the run-queue delay
    # in /proc/thread-self/schedstat), for SlowStatements to tell a statement's own time from the
    # load's. On a machine whose cores are all taken, a backend waits for a core before it reads
    # its socket as this process does before it reads the answer, and a `select 1` takes 10-450
    # ms of the server's time (bench/results/postgres-ruby-3.3.md, "Fast statements marked slow
    # under load"). Nothing the pool times can tell that wait from the statement's: the
    # statement's own answers are all it sees when it runs alone or on one connection.
    #
    # The share is this thread's run-queue delay over a recent span of wall time: 0 on an idle
    # machine, or a busy one whose reactor has idle cores to run on; 0.5-0.8 beside CPU-bound
    # processes that outnumber the cores. A thread that mostly sleeps in its poll waits less than
    # one that is always runnable, so the share errs low (towards the old judgement), never high.
    #
    # Reading the statistics (ThreadStatistics) costs a file's open, read and close (~21 µs of
    # CPU here; a file kept open would cost ~3, but names one thread, and the pool is read from
    # whichever thread uses it, in the process that made it and in its forked children): it is
    # read at most every SAMPLE seconds as answers come (#tick, ~0.2 ms of CPU a second at most),
    # and when a statement looks long (#share). Where the file
    # is missing (another operating system, a Linux without scheduler statistics) the share is
    # always 0. Used under the pool's lock.
    class CoreWait
      # The statistics file of the calling thread.
      SCHEDSTAT = ThreadStatistics::CALLING_THREAD
      # Seconds between readings as answers come: the span a share is measured over is at least
      # MIN_SPAN and at most about twice this, ending at the reading made when it is asked for.
      SAMPLE = 0.1
      # Seconds: a span shorter than this gives no share (a handful of scheduling decisions).
      MIN_SPAN = 0.01

      # Reads the calling thread's run-queue delay.
      # @return [Float, nil] seconds this thread has waited for a core since it started; nil
      #   where the statistics are not available
      def self.thread_wait
        ThreadStatistics.calling_thread&.last
      end

      # @param reader [#call] returns the calling thread's run-queue delay in seconds (nil when
      #   unknown); tests pass their own
      def initialize(reader = CoreWait.method(:thread_wait))
        @reader = reader
        @available = !reader.call.nil?
        @latest = nil   # [monotonic time, wait, thread] of the latest reading
        @previous = nil # the reading before it
        @next_at = -Float::INFINITY # the earliest monotonic time of the next reading by #tick
        @recent = 0.0 # the share between the last two readings (#recent)
        # A first reading, so that the pool's first statements have a span to be judged over.
        sample(Timers.now)
      end

      # Takes a reading if the latest is SAMPLE old (called for every answer read: a comparison).
      # @param now [Float] monotonic time
      # @return [void]
      def tick(now)
        sample(now) if now >= @next_at
        nil
      end

      # The share of wall time this thread spent waiting for a core between its last two
      # readings (a SAMPLE or so, up to the latest answer): no reading of its own, for a
      # decision made too often to pay one (Pipeline#hold_back's guard).
      # @return [Float] 0.0 to 1.0; 0.0 when unknown
      attr_reader :recent

      # The share of wall time this thread spent waiting for a core, from a reading at least
      # MIN_SPAN old (made by #tick, on this thread) to now.
      # @param now [Float] monotonic time
      # @return [Float] 0.0 to 1.0; 0.0 when unknown
      def share(now)
        return 0.0 unless @available
        since = @latest
        since = @previous if since && now - since[0] < MIN_SPAN
        current = sample(now)
        return 0.0 if since.nil? || current.nil? || !since[2].equal?(current[2])
        span = now - since[0]
        return 0.0 if span < MIN_SPAN
        (current[1] - since[1]).fdiv(span).clamp(0.0, 1.0)
      end

      private

      def sample(now)
        return nil unless @available
        wait = @reader.call or return nil
        reading = [now, wait, Thread.current]
        latest = @latest
        if latest && latest[2].equal?(reading[2]) && now - latest[0] >= MIN_SPAN
          @recent = (wait - latest[1]).fdiv(now - latest[0]).clamp(0.0, 1.0)
        end
        # A reading made just after the latest replaces it, so that the one before stays a
        # usable start (MIN_SPAN old) for #share.
        @previous = @latest unless @latest && now - @latest[0] < MIN_SPAN
        @latest = reading
        @next_at = now + SAMPLE
        reading
      end
    end
  end
end
