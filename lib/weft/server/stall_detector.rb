# frozen_string_literal: true

require_relative "log_text"

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
    # A reactor gets no turn for as long either because code holds it or because the process
    # gets no core: on a machine whose cores are all taken, a turn that runs a few milliseconds
    # of many requests' code each takes seconds by the wall clock, and the sample names
    # whichever request it found (a Rails app beside 4 CPU-bound processes on 2 cores: four
    # "stalls" of 1.2-1.7 s in 75 s, at four different places). Where Linux keeps per-thread
    # scheduler statistics, the line says how the reactor thread spent the stall: on a core
    # (code that held it), waiting for one (the machine's load), or neither (blocked in a system
    # call the scheduler does not see, or waiting for Ruby's lock held by another thread); and
    # when the watchdog found other requests running as the stall went on, it says how many.
    class StallDetector
      # The fiber-local (Thread#[]) in which a fiber answering requests keeps its Connection,
      # whose #env names the request being run (nil between requests), for the watchdog.
      REQUEST = :weft_request
      BACKTRACE_LINES = 30
      # Requests named at most as seen running during one stall.
      REQUESTS_SEEN = 5

      # A stall in progress, as sampled by the watchdog: `times` and `latest` are the reactor
      # thread's #thread_times from when the stall began (within a tick or two) and from the
      # watchdog's latest look at it, `requests` those seen running.
      Stall = Struct.new(:pulse, :since, :request, :backtrace, :reported, :times, :latest, :requests)

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
        @schedstat = "/proc/self/task/#{@reactor.native_thread_id}/schedstat"
        @schedstat = nil unless thread_times
        @pulse = Timers.now
        @ticker = Weft.spawn(name: "weft stall ticker") do
          loop do
            sleep(@tick)
            @pulse = Timers.now
          end
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
        early = nil # [pulse, #thread_times] read once the ticker was a tick late
        until @stopped
          sleep(@tick)
          pulse = @pulse
          now = Timers.now
          if stall && pulse != stall.pulse # the reactor turned again: the stall is over
            report(stall, pulse - stall.since, "") unless stall.reported
            stall = nil
          end
          late = now - (pulse + @tick)
          # The ticker is a tick late: the reactor may be stalling. The thread's statistics from
          # then, the stall's first tick or two, so that a healthy reactor costs no reading.
          early = [pulse, thread_times] if late >= @tick && early&.first != pulse
          # The ticker was due at pulse + tick and has not run since: the reactor was held.
          if stall.nil? && late >= @threshold
            stall = Stall.new(pulse, pulse + @tick, current_request, @reactor.backtrace, false,
                              early&.first == pulse ? early.last : nil, nil, {})
            @count += 1
          elsif stall && stall.requests.size < REQUESTS_SEEN
            stall.requests[current_request] = true
          end
          stall.latest = thread_times if stall&.times # read only during a stall
          if stall && !stall.reported && @report_after && now - stall.since >= @report_after
            report(stall, now - stall.since, " so far, and still going")
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

      # The reactor thread's scheduler statistics (Linux): [monotonic time, seconds it has run
      # on a core, seconds it has waited for one], nil where they are not kept.
      def thread_times
        return nil unless @schedstat
        ran, waited = File.read(@schedstat).split(" ", 3)
        [Timers.now, Integer(ran) / 1e9, Integer(waited) / 1e9]
      rescue SystemCallError, ArgumentError, TypeError
        nil
      end

      def report(stall, duration, suffix)
        where = stall.backtrace&.first(BACKTRACE_LINES) || []
        others = stall.requests.keys - [stall.request]
        meanwhile = if others.empty?
                      "no other request of this process ran meanwhile"
                    else
                      "#{others.size}#{'+' if stall.requests.size >= REQUESTS_SEEN} other request(s) or " \
                        "task(s) were seen running during it: a long turn of the reactor, not this request alone"
                    end
        Weft.logger.warn(["reactor stalled#{" (#{@name})" if @name}: #{stall.request} held it for " \
                          "#{format('%.2f', duration)}s#{suffix}; #{meanwhile}.#{thread_account(stall.times, stall.latest)} " \
                          "It was at:", *where].join("\n\t"))
      end

      # How the reactor thread spent the stall, between the readings at its start and at the
      # watchdog's latest look (nothing where the statistics are not kept). Off a core and not
      # waiting for one, the thread was blocked: a system call or Ruby's lock (another thread
      # held it).
      def thread_account(since, now)
        return "" unless since && now
        span = now[0] - since[0]
        return "" unless span.positive?
        ran = now[1] - since[1]
        waited = now[2] - since[2]
        blocked = [span - ran - waited, 0.0].max
        cause = if waited >= ran && waited >= blocked then "mostly kept off the cores by the machine's load"
                elsif blocked >= ran then "mostly blocked (a system call or Ruby's lock), not computing"
                else "mostly computing"
                end
        format(" Over %.2fs of it the reactor thread ran %.2fs, waited %.2fs for a core and was blocked %.2fs: %s.",
               span, ran, waited, blocked, cause)
      end
    end
  end
end
