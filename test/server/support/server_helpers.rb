# frozen_string_literal: true

require "net/http"
require "logger"
require "stringio"
require "timeout"
require "rack/lint"
require "weft/server"

module Weft
  module Test
    # Starting servers and talking raw HTTP to them in server tests.
    module ServerHelpers
      # A response read off a raw socket.
      RawResponse = Struct.new(:status, :headers, :body, :raw) do
        def [](name)
          headers[name.downcase]
        end
      end

      # Runs `app` (wrapped in Rack::Lint unless lint: false) in a Weft::Server on its own thread
      # and reactor, yields the server and its port, then stops it gracefully. The stop's drain
      # grace is short: tests leave keep-alive connections open, and each would hold the stop
      # for the default second. The sockets the block opened with #connect (and #raw_request,
      # #close_at_stop) are closed before the stop: a connection the server refused (413, 408, a malformed
      # request) lingers, reading what the client still sends until it closes, for up to
      # Connection::LINGER_SECONDS, and the stop waited that long for each test that left one.
      def with_server(app, lint: true, **options)
        app = Rack::Lint.new(app) if lint
        options = { binds: ["tcp://127.0.0.1:0"], workers: 0, shutdown_timeout: 5, drain_grace: 0.05 }.merge(options)
        server = Weft::Server.new(app, **options)
        port = server.listeners.first.port.to_i
        thread = Thread.new { server.run }
        thread.report_on_exception = false
        begin
          yield server, port
        ensure
          close_client_sockets
          server.stop
          thread.join(10) or flunk("server did not stop within 10 s")
          thread.value # re-raises what killed the server, if anything
        end
      end

      def http_get(port, path = "/", headers = {})
        Net::HTTP.start("127.0.0.1", port) { |http| http.get(path, headers) }
      end

      # A new connection to 127.0.0.1:`port`, closed at the end of #with_server if still open.
      def connect(port)
        close_at_stop(TCPSocket.new("127.0.0.1", port))
      end

      # Has #with_server close `socket` (a client's) before it stops the server.
      # @return [IO] the socket
      def close_at_stop(socket)
        (@client_sockets ||= []) << socket
        socket
      end

      # Closes the sockets #connect opened that are still open.
      def close_client_sockets
        @client_sockets&.each { |socket| socket.close unless socket.closed? }
        @client_sockets = nil
      end

      # Reads one response (Content-Length, chunked or close-delimited) off a socket.
      def read_response(socket, head_request: false)
        head = +""
        head << socket.readpartial(1) until head.end_with?("\r\n\r\n")
        lines = head.split("\r\n")
        status = lines.shift.split(" ")[1].to_i
        headers = {}
        lines.each do |line|
          name, value = line.split(": ", 2)
          key = name.downcase
          headers[key] = headers.key?(key) ? "#{headers[key]}\n#{value}" : value
        end
        body = +""
        if head_request || status == 204 || status == 304 || status < 200
          nil
        elsif headers["content-length"]
          body = read_exactly(socket, headers["content-length"].to_i)
        elsif headers["transfer-encoding"] == "chunked"
          loop do
            size = socket.gets("\r\n").to_i(16)
            chunk = read_exactly(socket, size)
            socket.read(2)
            break if size.zero?
            body << chunk
          end
        else
          body = socket.read
        end
        RawResponse.new(status, headers, body, head + body)
      end

      def read_exactly(socket, count)
        data = +""
        data << socket.readpartial(count - data.bytesize) while data.bytesize < count
        data
      end

      # Sends raw bytes on a new connection and returns the first response.
      def raw_request(port, bytes)
        socket = connect(port)
        socket.write(bytes)
        response = read_response(socket)
        [response, socket]
      end

      # @return [Boolean] whether the server closed the socket (EOF or a reset within `within`
      #   seconds; bytes still to read, or nothing at all in that time, are not a close: a socket
      #   the server left open and silent used to count as closed)
      def closed_by_server?(socket, within: 2)
        return false unless socket.wait_readable(within)
        socket.read_nonblock(1).nil?
      rescue EOFError, Errno::ECONNRESET
        true
      rescue IO::WaitReadable
        false
      end

      # The next item of `queue`, waiting at most `seconds` (then Timeout::Error). Not
      # Queue#pop(timeout:), which Ruby 3.1 reads as pop(non_block) and so never waits.
      def pop_within(queue, seconds)
        Timeout.timeout(seconds) { queue.pop }
      end
    end
  end
end
