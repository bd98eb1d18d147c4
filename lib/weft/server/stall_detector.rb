# frozen_string_literal: true

require_relative "log_text"
require_relative "../thread_statistics"

module Weft
  class Server
    # Finds requests that hold the reactor: code that computes (or blocks the thread) without
    # giving the reactor a turn stalls every other connection of the process, and nothing in the
    # request's own timing shows it. Each stall that lasts `threshold` seconds or more is logged
    # once, naming the request that was running, the duration, and the backtrace of where it
    # was stuck.
    #
    # Two parts:
    # - a ticker task in the reactor records the time every `threshold / 10` seconds (at most
    #   0.1 s). It can only run when the reactor turns, so an old timestamp means a stall, however
    #   the stalling code was entered (from the loop's ready queue or from inside the selector's
    #   event dispatch, which a per-turn measurement in the loop would miss);
    # - a watchdog thread compares that timestamp with the clock. When it is `threshold` old, it
    #   samples the reactor thread: Thread#backtrace and Thread#[] read the fiber that thread
    #   is running now (MRI takes them under the GVL, at a point where the reactor thread is
    #   stopped safely), so the sample shows the stuck request and where it is. The line is
    #   logged once the reactor turns again, with the duration; a stall still going on after
    #   `report_after` seconds is logged then instead (a worker about to be killed by the
    #   master's worker_timeout says where it was stuck).
    #
    # Durations are lower bounds, exact to within one tick.
    #
    # A reactor also gets no turn while the process gets no core: on a machine whose cores are
    # all taken, a turn that runs a few milliseconds of each of many requests' code takes
    # seconds by the wall clock, and the sample names whichever request it found, most often
    # one that had let go of Ruby's lock for a system call, which is when the watchdog can take
    # it (a Rails app beside 4 CPU-bound processes on 2 cores: "stalls" of 1.1-4.3 s in which
    # the reactor thread ran 5-19% of the time). Where Linux keeps per-thread scheduler
    # statistics, the ticker reads the reactor thread's with each pulse, and the line says how
    # the thread spent the stall: on a core (code that held it), waiting for one (the machine's
    # load), or neither (blocked in a system call the scheduler does not see, or waiting for
    # Ruby's lock held by another thread).
    class StallDetector
      # The fiber-local (Thread#[]) in which a fiber answering requests keeps its Connection,
      # whose #env names the request being run (nil between requests), for the watchdog.
      REQUEST = :weft_request
      BACKTRACE_LINES = 30

      # A stall in progress, as sampled by the watchdog; `beat` is the ticker's last before it
      # (#beat).
      Stall = Struct.new(:pulse, :since, :request, :backtrace, :reported, :beat)

      # @return [Integer] stalls detected since #start
      attr_reader :count

      # @param threshold [Numeric] seconds without a reactor turn that make a stall
      # @param report_after [Numeric, nil] log a stall still going on after this many seconds
      # @param name [String, nil] who is stalled, for the log line (e.g. "worker 2")
      def initialize(threshold, report_after: nil, name: nil)
        @threshold = threshold
        @tick = [threshold / 10.0, 0.1].min
        @report_after = report_after
        @name = name
        @count = 0
        @stopped = false
      end

      # Starts the ticker (a task of the current reactor) and the watchdog thread. Call inside
      # the reactor to watch.
      def start
        @reactor = Thread.current
        @reactor_statistics = ThreadStatistics.new(@reactor).keep_open
        @beat = beat
        @ticker = Weft.spawn(name: "weft stall ticker") do
          loop do
            sleep(@tick)
            @beat = beat
          end
        ensure
          @reactor_statistics.close
        end
        @watchdog = Thread.new { watch }
        @watchdog.name = "weft stall detector"
      end

      # Stops both parts. Call inside the watched reactor.
      def stop
        @ticker&.cancel
        @stopped = true
        @watchdog&.wakeup
      rescue ThreadError
        nil # the watchdog already ended
      end

      private

      def watch
        stall = nil
        until @stopped
          sleep(@tick)
          latest = @beat # the ticker's
          pulse = latest[0]
          now = Timers.now
          if stall && pulse != stall.pulse # the reactor turned again: the stall is over
            report(stall, pulse - stall.since, "", latest) unless stall.reported
            stall = nil
          end
          # The ticker was due at pulse + tick and has not run since: the reactor was held.
          if stall.nil? && now - (pulse + @tick) >= @threshold
            stall = Stall.new(pulse, pulse + @tick, current_request, @reactor.backtrace, false, latest)
            @count += 1
          end
          if stall && !stall.reported && @report_after && now - stall.since >= @report_after
            report(stall, now - stall.since, " so far, and still going", beat)
            stall.reported = true
          end
        end
      rescue StandardError => e
        Weft.logger.error("stall detector stopped: #{e.class}: #{e.message}")
      end

      # @return [String] the request the reactor thread is running, as "METHOD /path", escaped
      #   (LogText: the path and query are the client's, or what the app left in them)
      def current_request
        env = @reactor[REQUEST]&.env
        return "no request (server or background task)" unless env
        query = env["QUERY_STRING"]
        LogText.escape("#{env['REQUEST_METHOD']} #{env['SCRIPT_NAME']}#{env['PATH_INFO']}" \
                       "#{"?#{query}" unless query.nil? || query.empty?}")
      end

      # A pulse: [monotonic time, [seconds the reactor thread has run on a core, seconds it has
      # waited for one]], the second nil where Linux does not keep them. Read by the ticker ten
      # times a second (from the file kept open: one pread and the parse, 3.5-6 µs of CPU) and
      # by the watchdog for a stall still going on. Timed once read, as the figures are.
      def beat
        figures = @reactor_statistics.read
        [Timers.now, figures]
      end

      def report(stall, duration, suffix, beat)
        where = stall.backtrace&.first(BACKTRACE_LINES) || []
        Weft.logger.warn(["reactor stalled#{" (#{@name})" if @name}: #{stall.request} held it for " \
                          "#{format('%.2f', duration)}s#{suffix}; no other request of this process ran " \
                          "meanwhile.#{thread_account(stall.beat, beat)} It was at:", *where].join("\n\t"))
      end

      # How the reactor thread spent the stall, from the ticker's beat before it to the one that
      # ended it (or the watchdog's reading, for one still going on); nothing where the
      # statistics are not kept. Off a core and not waiting for one, the thread was blocked: a
      # system call or Ruby's lock (another thread held it). Linux adds a wait for a core when
      # the wait ends, so the figures are exact to within one such wait.
      def thread_account(since, till)
        before = since[1]
        after = till[1]
        return "" unless before && after
        span = till[0] - since[0]
        return "" unless span.positive?
        ran = after[0] - before[0]
        waited = after[1] - before[1]
        blocked = [span - ran - waited, 0.0].max
        cause = if waited >= ran && waited >= blocked then "mostly kept off the cores by the machine's load"
                elsif blocked >= ran then "mostly blocked (a system call or Ruby's lock), not computing"
                else "mostly computing"
                end
        format(" Over the %.2fs between its pulses the reactor thread ran %.2fs, waited %.2fs for a core " \
               "and was blocked %.2fs: %s.", span, ran, waited, blocked, cause)
      end
    end
  end
end
