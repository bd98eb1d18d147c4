# frozen_string_literal: true

require_relative "log_text"

module Weft
  class Server
    # One line per request in the Common Log Format, plus the time taken:
    #   127.0.0.1 - - [22/Nov/2026:17:30:00 +0000] "GET /path?q HTTP/1.1" 200 - 0.0012
    # The request's fields are escaped (LogText): a `"` or a line break in them cannot end the
    # quoted field or forge a line.
    class AccessLog
      # @param target [nil, String, IO] nil: no log; "-": stdout; a path: appended to
      # @return [AccessLog, nil]
      def self.open(target)
        case target
        when nil, false then nil
        when "-" then new($stdout)
        when String then new(File.open(target, "a").tap { |file| file.sync = true })
        else new(target)
        end
      end

      def initialize(io)
        @io = io
      end

      # Writes the line for one request.
      def log(env, status, duration, remote_addr)
        query = env["QUERY_STRING"]
        # Each field escaped by itself: pieces of different encodings (a binary PATH_INFO with
        # bytes past ASCII, a UTF-8 query) would not even join.
        path = LogText.escape(env["PATH_INFO"])
        path = "#{path}?#{LogText.escape(query)}" unless query.nil? || query.empty?
        time = Time.now.strftime("%d/%b/%Y:%H:%M:%S %z")
        request = "#{LogText.escape(env['REQUEST_METHOD'])} #{path} #{LogText.escape(env['SERVER_PROTOCOL'])}"
        @io.write("#{remote_addr} - - [#{time}] \"#{request}\" " \
                  "#{status || '-'} - #{format('%.4f', duration)}\n")
      rescue IOError, SystemCallError
        nil
      end
    end
  end
end
