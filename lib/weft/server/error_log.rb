# frozen_string_literal: true

require_relative "log_text"

module Weft
  class Server
    # Logs errors with their backtrace, once: an error that repeats (same class, same first
    # backtrace lines — the message is left out, it often carries ids or object addresses) is
    # counted instead, and a one-line summary is logged at most every `interval` seconds:
    #
    #   GET /orders/7: NoMethodError: undefined method `total' for nil (repeated 4180 times in
    #   the last 10.0s; backtrace logged before)
    #
    # An app failing on every request used to write a backtrace per request (30 MB in 5 s); the
    # log now grows by one line per distinct error per interval. An error that stayed quiet for
    # a whole interval is forgotten, so when it comes back it is logged in full again.
    class ErrorLog
      # Backtrace lines that, with the class, identify an error.
      KEY_LINES = 3
      # Distinct errors remembered at once; past that the oldest is forgotten.
      MAX_ERRORS = 1000

      # One distinct error being counted.
      Entry = Struct.new(:repeats, :since, :last)

      # @param interval [Numeric] seconds between summaries of a repeating error
      # @param logger [Logger, nil] where to write (nil: Weft.logger at the time of writing)
      def initialize(interval, logger: nil)
        @interval = interval
        @logger = logger
        @entries = {}
        @flusher = nil
      end

      # Logs `error` in full, or counts it when it repeats one logged in full recently.
      # @param context [String] what failed, e.g. "GET /path": escaped (LogText), since the path
      #   is the client's (or whatever the app left in PATH_INFO), and a line break in it would
      #   forge a log line. The error's message may quote a client's bytes too (an id, a
      #   header): its line breaks become continuation lines and its control bytes are escaped
      #   (LogText.escape_message). The backtrace is written as it is (the app's own paths).
      def report(context, error)
        context = LogText.escape(context)
        backtrace = error.backtrace || []
        key = [error.class, *backtrace.first(KEY_LINES)]
        entry = @entries[key]
        if entry
          entry.repeats += 1
          entry.last = "#{context}: #{error.class}: #{first_line(error.message)}"
          summarize(entry, Timers.now) if Timers.now - entry.since >= @interval
        else
          @entries.shift if @entries.size >= MAX_ERRORS
          @entries[key] = Entry.new(0, Timers.now, nil)
          logger.error(["#{context}: #{error.class}: #{LogText.escape_message(error.message)}", *backtrace].join("\n\t"))
        end
      end

      # Logs the summary of every error that repeated over a whole interval since its last one
      # (every one that repeated at all with `all`), and forgets the errors that did not
      # repeat for a whole interval.
      # @return [void]
      def flush(all: false)
        now = Timers.now
        @entries.delete_if do |_, entry|
          due = now - entry.since >= @interval
          if entry.repeats.positive?
            summarize(entry, now) if due || all
            false
          else
            due
          end
        end
      end

      # Starts a task that flushes every interval, so that the count of an error that stopped
      # repeating is logged too. Call inside the server's reactor.
      def start
        @flusher = Weft.spawn(name: "weft error log") do
          loop do
            sleep(@interval)
            flush
          end
        end
      end

      # Stops the flushing task and logs what is still counted.
      def stop
        @flusher&.cancel
        @flusher = nil
        flush(all: true)
      end

      private

      def logger
        @logger || Weft.logger
      end

      def summarize(entry, now)
        logger.error("#{entry.last} (repeated #{entry.repeats} #{entry.repeats == 1 ? 'time' : 'times'} " \
                      "in the last #{format('%.1f', now - entry.since)}s; backtrace logged before)")
        entry.repeats = 0
        entry.since = now
      end

      def first_line(text)
        LogText.escape_message(text.to_s.lines.first.to_s.chomp)
      end
    end
  end
end
