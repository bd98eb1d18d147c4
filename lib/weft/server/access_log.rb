# frozen_string_literal: true

module Weft
  class Server
    # One line per request in the Common Log Format, plus the time taken:
    #   127.0.0.1 - - [22/Nov/2026:17:30:00 +0000] "GET /path?q HTTP/1.1" 200 - 0.0012
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
        path = query.nil? || query.empty? ? env["PATH_INFO"] : "#{env['PATH_INFO']}?#{query}"
        time = Time.now.strftime("%d/%b/%Y:%H:%M:%S %z")
        @io.write("#{remote_addr} - - [#{time}] \"#{env['REQUEST_METHOD']} #{path} #{env['SERVER_PROTOCOL']}\" " \
                  "#{status || '-'} - #{format('%.4f', duration)}\n")
      rescue IOError, SystemCallError
        nil
      end
    end
  end
end
