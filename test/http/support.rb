# frozen_string_literal: true

require "socket"
require "openssl"
require "tmpdir"
require "weft/http1/parser"
require_relative "../support/certificates"

module Weft
  module Test
    # Small HTTP/1.1 servers for the client's tests: a thread per connection, keep-alive, a
    # handler per request, counters to assert connection reuse, and raw mode for servers that
    # misbehave on purpose. Independent of Weft's own server.
    class HTTPServer
      Request = Struct.new(:method, :path, :query, :env, :body, :connection_id)

      # @return [Integer] connections accepted
      attr_reader :connections
      # @return [Array<Request>] every request received, in order
      attr_reader :requests
      attr_reader :port, :path
      # @return [Array<Boolean>] per TLS connection, whether it resumed an earlier session
      attr_reader :tls_resumed

      # @param tls [OpenSSL::SSL::SSLContext, nil]
      # @param unix [String, nil] listen on this unix socket path instead of TCP
      # @param raw [Boolean] the handler gets each accepted socket (and the connection number)
      #   and does what it likes with it
      # @yield [Request] and returns [status, headers, body]; body a String or an Array
      #   (sent chunked); headers may include "connection" => "close"
      def initialize(tls: nil, unix: nil, raw: false, &handler)
        @handler = handler
        @raw = raw
        @tls = tls
        @connections = 0
        @tls_resumed = []
        @requests = []
        @lock = Mutex.new
        @threads = []
        @clients = []
        if unix
          @path = unix
          @server = UNIXServer.new(unix)
        else
          @server = TCPServer.new("127.0.0.1", 0)
          @port = @server.addr[1]
        end
        @acceptor = Thread.new { accept_loop }
        @acceptor.report_on_exception = false
      end

      def url(path = "")
        scheme = @tls ? "https" : "http"
        @path ? "unix://#{@path}" : "#{scheme}://127.0.0.1:#{@port}#{path}"
      end

      def close
        @server.close rescue nil
        @acceptor.kill
        @lock.synchronize { @clients.each { |c| c.close rescue nil } }
        @threads.each { |t| t.kill; t.join(1) }
      end

      private

      def accept_loop
        loop do
          socket = @server.accept
          id = @lock.synchronize { @connections += 1 }
          thread = Thread.new { serve(socket, id) }
          thread.report_on_exception = false
          @lock.synchronize { @threads << thread; @clients << socket }
        end
      rescue IOError, Errno::EBADF
        nil
      end

      def serve(socket, id)
        if @tls
          ssl = OpenSSL::SSL::SSLSocket.new(socket, @tls)
          ssl.sync_close = true
          begin
            ssl.accept
          rescue OpenSSL::SSL::SSLError, Errno::ECONNRESET
            return socket.close
          end
          @lock.synchronize { @tls_resumed << ssl.session_reused? }
          socket = ssl
        end
        return @handler.call(socket, id) if @raw
        serve_http(socket, id)
      rescue IOError, Errno::ECONNRESET, Errno::EPIPE, OpenSSL::SSL::SSLError
        nil
      ensure
        socket.close rescue nil
      end

      def serve_http(socket, id)
        parser = Weft::HTTP1::RequestParser.new
        buffer = String.new(encoding: Encoding::BINARY)
        loop do
          env = {}
          until (count = parser.parse(buffer, env))
            chunk = socket.readpartial(65_536) rescue return
            buffer << chunk
          end
          buffer = buffer.byteslice(count..)
          body = String.new(encoding: Encoding::BINARY)
          if parser.chunked?
            decoder = Weft::HTTP1::ChunkedDecoder.new
            until decoder.decode(buffer, body)
              buffer << socket.readpartial(65_536)
            end
          elsif (length = parser.content_length)
            buffer << socket.readpartial(65_536) while buffer.bytesize < length
            body = buffer.byteslice(0, length)
            buffer = buffer.byteslice(length..)
          end
          request = Request.new(env["REQUEST_METHOD"], env["PATH_INFO"], env["QUERY_STRING"], env, body, id)
          @lock.synchronize { @requests << request }
          status, headers, payload = @handler.call(request)
          headers = headers.transform_keys(&:downcase)
          close = headers["connection"] == "close" || !parser.keep_alive?
          write_response(socket, request, status, headers, payload)
          break if close
        end
      end

      def write_response(socket, request, status, headers, payload)
        head = +"HTTP/1.1 #{status} X\r\n"
        chunked = payload.is_a?(Array)
        headers.each { |name, value| head << "#{name}: #{value}\r\n" }
        unless headers.key?("content-length") || [204, 304].include?(status)
          head << (chunked ? "transfer-encoding: chunked\r\n" : "content-length: #{payload.to_s.bytesize}\r\n")
        end
        head << "\r\n"
        socket.write(head)
        return if request.method == "HEAD"
        if chunked
          payload.each do |piece|
            socket.write("#{piece.bytesize.to_s(16)}\r\n#{piece}\r\n")
            socket.flush
          end
          socket.write("0\r\n\r\n")
        else
          socket.write(payload.to_s)
        end
      end
    end

    # Setup shared by the client's test classes: servers and clients made through #server and
    # #client are closed after each test. Clients ignore proxies from the environment unless a
    # test passes one.
    module HTTPFixtures
      def setup
        super
        @servers = []
        @clients = []
      end

      def teardown
        @clients.each(&:close)
        @servers.each(&:close)
        super
      end

      def server(**options, &handler)
        (@servers << Weft::Test::HTTPServer.new(**options, &handler)).last
      end

      def client(*args, proxy: nil, **options)
        (@clients << Weft::HTTP::Client.new(*args, proxy: proxy, **options)).last
      end
    end
  end
end
