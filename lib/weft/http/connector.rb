# frozen_string_literal: true

require "socket"
require "openssl"
require_relative "../http1/parser"
require_relative "../stream"
require_relative "errors"
require_relative "connection"

module Weft
  module HTTP
    # Opens connections: DNS, TCP or unix connect, HTTP proxy tunnels and the TLS handshake,
    # all within the request's connect timeout. Keeps the TLS context and, per origin, the
    # last TLS session so that new connections resume it (an abbreviated handshake).
    class Connector
      # An SSLSocket that knows which origin's session cache its new sessions belong to.
      class TLSSocket < OpenSSL::SSL::SSLSocket
        # @return [String, nil] the origin whose TLS session cache this socket's sessions go to
        attr_accessor :session_key
      end

      REFUSED = [Errno::ECONNREFUSED, Errno::ENOENT].freeze
      UNREACHABLE = [Errno::EHOSTUNREACH, Errno::ENETUNREACH, Errno::EADDRNOTAVAIL, Errno::ECONNRESET,
                     Errno::ETIMEDOUT, Errno::EACCES, Errno::ENOTSOCK].freeze

      # @param ssl [Hash] TLS options: verify (default true), ca_file, ca_path, cert_store, cert,
      #   key, min_version, max_version, ciphers, verify_hostname (default true)
      # @param proxy [Proxy, nil] where to find the proxy for an origin
      def initialize(ssl: {}, proxy: nil)
        @ssl = ssl || {}
        @verify = @ssl.fetch(:verify, true) && @ssl[:verify_mode] != OpenSSL::SSL::VERIFY_NONE
        @proxy = proxy
        @sessions = {}
        @sessions_lock = Thread::Mutex.new
        @tls_context = nil
      end

      # Opens a connection to `origin` (through its proxy, if any).
      # @return [Connection]
      def open(origin, budget)
        budget.start(:connect)
        return open_unix(origin, budget) if origin.unix?

        proxy = @proxy&.for(origin)
        socket = proxy ? tcp(proxy.host, proxy.port, budget) : tcp(origin.host, origin.port, budget, origin.ip?)
        stream = stream_for(socket)
        begin
          if origin.tls?
            tunnel(stream, origin, proxy, budget) if proxy
            handshake(stream, origin, budget)
            Connection.new(stream, origin)
          else
            Connection.new(stream, origin, proxied: !proxy.nil?, proxy_headers: proxy ? proxy.headers : [])
          end
        rescue Exception # rubocop:disable Lint/RescueException
          stream.close
          raise
        end
      end

      # @return [OpenSSL::SSL::Session, nil] the session kept for resuming TLS to `origin`
      def session_for(origin)
        @sessions_lock.synchronize { @sessions[origin.to_s] }
      end

      private

      def open_unix(origin, budget)
        socket = Socket.new(:UNIX, :STREAM)
        connect(socket, Socket.sockaddr_un(origin.socket_path), budget)
        Connection.new(stream_for(socket), origin)
      rescue *REFUSED => e
        socket&.close
        raise ConnectionRefused, "nothing listens on unix socket #{origin.socket_path} (#{e.message})"
      rescue Exception # rubocop:disable Lint/RescueException
        socket&.close
        raise
      end

      # Connects to the first of the host's addresses that accepts, in resolver order. While
      # other addresses remain, an attempt gets only its share of the connect timeout (at
      # least 2 s, as Go's dialer does), so one black-holed address (say an IPv6 route that
      # drops packets) cannot use up the time the next one needs.
      # @param literal [Boolean] whether `host` is an IP address (no DNS)
      def tcp(host, port, budget, literal = ip_literal?(host))
        last_error = nil
        addresses = literal ? [Addrinfo.tcp(host, port)] : resolve(host, port, budget)
        raise DNSError, "#{host} resolved to no address" if addresses.empty?
        addresses.each_with_index do |address, index|
          socket = Socket.new(address.afamily, :STREAM)
          begin
            connect(socket, address, budget, attempt_limit(budget, addresses.size - index))
            socket.setsockopt(Socket::IPPROTO_TCP, Socket::TCP_NODELAY, 1)
            return socket
          rescue *REFUSED, *UNREACHABLE => e
            socket.close
            last_error = e
          rescue Exception # rubocop:disable Lint/RescueException
            socket.close
            raise
          end
        end
        if REFUSED.include?(last_error.class)
          raise ConnectionRefused, "connection refused by #{host}:#{port}"
        end
        raise ConnectionError, "cannot connect to #{host}:#{port}: #{last_error.message}"
      end

      def stream_for(socket)
        Weft::Stream.new(socket, read_size: Connection::READ_SIZE)
      end

      # @param attempt [Float, nil] seconds for this address, if less than the connect budget
      def connect(socket, address, budget, attempt = nil)
        return if socket.connect_nonblock(address, exception: false) == 0
        if attempt
          raise Errno::ETIMEDOUT, address.inspect_sockaddr unless socket.wait_writable(attempt)
        else
          budget.wait(socket, :connect, writable: true)
        end
        socket.connect_nonblock(address, exception: false)
      rescue Errno::EISCONN
        nil
      end

      # @return [Float, nil] the share of the connect time left for one of `left` addresses,
      #   or nil when the attempt may use all of it
      def attempt_limit(budget, left)
        return nil if left < 2
        seconds, = budget.limit(:connect)
        return nil unless seconds
        share = [seconds / left, [2.0, seconds].min].max
        share < seconds ? share : nil
      end

      # Resolves within the connect limit: inside a reactor the scheduler's resolver thread does
      # the lookup and Budget#within's timer ends the wait; outside one, #resolve_within.
      def resolve(host, port, budget)
        budget.within(:connect) do |seconds|
          if seconds && !Weft.running?
            resolve_within(host, port, seconds)
          else
            Addrinfo.getaddrinfo(host, port, nil, :STREAM)
          end
        end
      rescue SocketError => e
        raise DNSError, "cannot resolve #{host}: #{e.message}" unless e.message.match?(/timed? ?out/i)
        _, error = budget.limit(:connect)
        raise error, "resolving #{host} timed out"
      end

      # getaddrinfo in a plain thread, waited for at most `seconds`. Ruby's own `timeout:` for it
      # needs getaddrinfo_a, which neither Debian's Ruby 3.1 nor Ruby 3.3 is built with (it was
      # ignored: an unanswered query held a request for the resolver's 5 s x attempts, past the
      # connect timeout and the deadline), and Timeout cannot interrupt it on 3.1. So the lookup
      # runs in a thread of its own, left to end by itself when the caller stops waiting. One
      # thread per lookup, only outside a reactor and only when a connection to a host name opens.
      # @raise [SocketError] when it does not answer in time (or fails)
      def resolve_within(host, port, seconds)
        lookup = Thread.new { Addrinfo.getaddrinfo(host, port, nil, :STREAM) }
        lookup.report_on_exception = false
        raise SocketError, "getaddrinfo timed out after #{seconds.round(3)}s" unless lookup.join(seconds)
        lookup.value
      end

      def ip_literal?(host)
        IPAddr.new(host)
        true
      rescue IPAddr::Error
        false
      end

      # Asks an HTTP proxy for a tunnel to `origin` (CONNECT), for TLS end to end. Its writes and
      # reads are part of connecting, bounded by the connect timeout.
      def tunnel(stream, origin, proxy, budget)
        head = +"CONNECT #{origin.authority} HTTP/1.1\r\nHost: #{origin.authority}\r\n"
        proxy.headers.each { |name, value| head << "#{name}: #{value}\r\n" }
        head << "\r\n"
        connecting = budget.as(:connect)
        stream.write(head, connecting)
        parser = HTTP1::ResponseParser.new
        until (length = parser.parse(stream.buffer))
          next if stream.fill(connecting)
          raise ProxyError, "proxy #{proxy.host}:#{proxy.port} closed the connection during CONNECT"
        end
        stream.consume(length)
        return if parser.status == 200
        raise ProxyError, "proxy #{proxy.host}:#{proxy.port} refused CONNECT #{origin.authority}: #{parser.status} #{parser.reason}"
      rescue HTTP1::ParseError => e
        raise ProxyError, "malformed answer from proxy to CONNECT: #{e.message}"
      rescue Weft::ConnectionLost => e
        raise ProxyError, "proxy #{proxy.host}:#{proxy.port} broke the connection during CONNECT (#{e.message})"
      end

      def handshake(stream, origin, budget)
        ssl = TLSSocket.new(stream.to_io, tls_context)
        ssl.sync_close = true
        ssl.session_key = origin.to_s
        ssl.hostname = origin.host unless origin.ip? # SNI, and the name verified during the handshake
        session = session_for(origin)
        ssl.session = session if session
        stream.connect_tls(ssl, budget)
        ssl.post_connection_check(origin.host) if @verify && @ssl.fetch(:verify_hostname, true)
      rescue OpenSSL::SSL::SSLError, Weft::ConnectionLost => e
        # The stream reports a failed handshake as ConnectionLost, caused by OpenSSL's error.
        e = e.cause if e.cause.is_a?(OpenSSL::SSL::SSLError)
        reason = e.message
        verify_result = ssl&.verify_result
        if @verify && (verify_result && verify_result != OpenSSL::X509::V_OK || reason.include?("hostname"))
          reason = verify_result && verify_result != OpenSSL::X509::V_OK ? verify_error_string(verify_result) : reason
          raise TLSVerificationError, "TLS certificate of #{origin} did not verify: #{reason}"
        end
        raise TLSError, "TLS handshake with #{origin} failed: #{reason}"
      end

      def verify_error_string(code)
        name = OpenSSL::X509.constants.find do |const|
          const.to_s.start_with?("V_ERR_") && OpenSSL::X509.const_get(const) == code
        end
        name ? "#{name.to_s.delete_prefix('V_ERR_').downcase.tr('_', ' ')} (#{code})" : "error #{code}"
      end

      def tls_context
        @tls_context || @sessions_lock.synchronize { @tls_context ||= build_tls_context }
      end

      def build_tls_context
        context = OpenSSL::SSL::SSLContext.new
        params = { verify_mode: @verify ? OpenSSL::SSL::VERIFY_PEER : OpenSSL::SSL::VERIFY_NONE,
                   verify_hostname: @verify && @ssl.fetch(:verify_hostname, true) }
        params[:cert_store] = cert_store if @verify
        %i[cert key min_version max_version ciphers].each { |key| params[key] = @ssl[key] if @ssl[key] }
        params[:cert] = OpenSSL::X509::Certificate.new(File.read(@ssl[:client_cert_file])) if @ssl[:client_cert_file]
        params[:key] = OpenSSL::PKey.read(File.read(@ssl[:client_key_file])) if @ssl[:client_key_file]
        context.set_params(params)
        # Keep each new session (TLS 1.3 sends its tickets after the handshake) for the origin.
        context.session_cache_mode = OpenSSL::SSL::SSLContext::SESSION_CACHE_CLIENT |
                                     OpenSSL::SSL::SSLContext::SESSION_CACHE_NO_INTERNAL_STORE
        sessions = @sessions
        lock = @sessions_lock
        context.session_new_cb = lambda do |(socket, session)|
          key = socket.respond_to?(:session_key) && socket.session_key
          lock.synchronize { sessions[key] = session } if key
        end
        context.setup # freezes it: one context is shared by every connection of the client
        context
      end

      def cert_store
        return @ssl[:cert_store] if @ssl[:cert_store]
        store = OpenSSL::X509::Store.new
        if @ssl[:ca_file] || @ssl[:ca_path]
          store.add_file(@ssl[:ca_file]) if @ssl[:ca_file]
          store.add_path(@ssl[:ca_path]) if @ssl[:ca_path]
        else
          store.set_default_paths
        end
        store
      end
    end
  end
end
