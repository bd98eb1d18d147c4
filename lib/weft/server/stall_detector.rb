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
    class StallDetector
      # The fiber-local (Thread#[]) in which a fiber answering requests keeps its Connection,
      # whose #env names the request being run (nil between requests), for the watchdog.
      REQUEST = :weft_request
      BACKTRACE_LINES = 30

      # A stall in progress, as sampled by the watchdog.
      Stall = Struct.new(:pulse, :since, :request, :backtrace, :reported)

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
        until @stopped
          sleep(@tick)
          pulse = @pulse
          now = Timers.now
          if stall && pulse != stall.pulse # the reactor turned again: the stall is over
            report(stall, pulse - stall.since, "") unless stall.reported
            stall = nil
          end
          # The ticker was due at pulse + tick and has not run since: the reactor was held.
          if stall.nil? && now - (pulse + @tick) >= @threshold
            stall = Stall.new(pulse, pulse + @tick, current_request, @reactor.backtrace, false)
            @count += 1
          end
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

      def report(stall, duration, suffix)
        where = stall.backtrace&.first(BACKTRACE_LINES) || []
        Weft.logger.warn(["reactor stalled#{" (#{@name})" if @name}: #{stall.request} held it for " \
                          "#{format('%.2f', duration)}s#{suffix}; no other request of this process ran " \
                          "meanwhile. It was at:", *where].join("\n\t"))
      end
    end
  end
end
