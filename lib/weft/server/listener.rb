# frozen_string_literal: true

require "ipaddr"
require "socket"
require_relative "bind_address"
require_relative "../errors"

module Weft
  class Server
    # A listening socket made from a bind URL, and what a connection needs to know about it.
    #
    #   tcp://HOST:PORT                         (HOST may be an IPv6 literal in brackets)
    #   unix:///path/to.sock
    #   ssl://HOST:PORT?cert=PATH&key=PATH      TLS over TCP
    #
    # Sockets are created by the master (or the single process) and inherited by forked workers
    # and, across a hot restart, by the re-executed master (fd numbers passed in WEFT_LISTEN_FDS).
    class Listener
      # The address is valid but the system refused it (in use, permission denied...).
      class BindError < StandardError
        include Weft::Error
      end

      # @return [String] the URL it was made from
      attr_reader :url
      # @return [Socket] the listening socket
      attr_reader :socket
      # @return [OpenSSL::SSL::SSLContext, nil]
      attr_reader :ssl_context

      # Binds and listens. With `reuse_port`, a TCP socket gets SO_REUSEPORT and is only bound,
      # not listening: it reserves the address (and is what a hot restart passes on), while each
      # worker listens on a socket of its own in the same group (#reuse_port_sibling), so the
      # kernel hashes new connections evenly over the workers.
      def self.bind(url, backlog: 1024, reuse_port: false)
        address = BindAddress.parse(url)
        target = address.addrinfo
        File.unlink(address.path) if address.unix? && File.socket?(address.path) # left by an earlier run
        socket = Socket.new(target.afamily, :STREAM)
        begin
          unless address.unix?
            socket.setsockopt(:SOCKET, :REUSEADDR, true)
            socket.setsockopt(:SOCKET, :REUSEPORT, true) if reuse_port
          end
          socket.bind(target)
          socket.listen(backlog) unless reuse_port && !address.unix?
        rescue SystemCallError => e
          socket.close
          raise BindError, "cannot bind #{url}: #{e.message}"
        end
        new(url, socket, address)
      end

      # Wraps an inherited listening descriptor (hot restart).
      def self.inherit(url, fd)
        new(url, Socket.for_fd(fd))
      end

      # @param url [String]
      # @param socket [Socket] bound (and usually listening)
      # @param address [BindAddress] the parsed url
      def initialize(url, socket, address = BindAddress.parse(url))
        @url = url
        @socket = socket
        @socket.close_on_exec = false # kept across a hot restart's exec
        @address = address
        @unix = @address.unix?
        @ssl_context = ssl? ? build_ssl_context : nil
        @scheme = ssl? ? "https" : "http"
        local = socket.local_address
        @port = @unix ? "0" : local.ip_port.to_s
        @host = @unix ? "localhost" : local.ip_address
      end

      # A second listening socket on the same TCP address (SO_REUSEPORT), for one worker: the
      # kernel spreads new connections evenly over the sockets of the group by hash.
      # @return [Listener, nil] nil for Unix sockets or when this socket lacks SO_REUSEPORT
      def reuse_port_sibling(backlog)
        return nil if @unix || !@socket.getsockopt(:SOCKET, :REUSEPORT).bool
        address = @socket.local_address
        socket = Socket.new(address.ipv6? ? :INET6 : :INET, :STREAM)
        socket.setsockopt(:SOCKET, :REUSEADDR, true)
        socket.setsockopt(:SOCKET, :REUSEPORT, true)
        socket.bind(address)
        socket.listen(backlog)
        sibling = self.class.new(@url, socket, @address)
        socket.close_on_exec = true # only the shared sockets survive a hot restart
        sibling
      end

      # @return [Boolean]
      def ssl?
        @address.ssl?
      end

      # @return [String] rack.url_scheme
      attr_reader :scheme
      # @return [String] the bound port ("0" for a Unix socket), the SERVER_PORT fallback
      attr_reader :port
      # @return [String] the bound address, the SERVER_NAME fallback
      attr_reader :host

      # @return [String] the URL with the port actually bound (useful with port 0)
      def bound_url
        return @url if @unix
        host = @host.include?(":") ? "[#{@host}]" : @host
        "#{@address.scheme}://#{host}:#{@port}"
      end

      # @return [Socket, nil] an accepted connection, or nil if none is waiting (or the one that
      #   was gave up first: that must not end the accept loop)
      # @raise [SystemCallError] out of file descriptors or memory (EMFILE, ENFILE, ENOBUFS...)
      def accept_nonblock
        socket, = @socket.accept_nonblock(exception: false)
        return nil if socket == :wait_readable
        begin
          socket.setsockopt(:TCP, :NODELAY, true) unless @unix
        rescue SystemCallError # reset by the client already
          socket.close
          return nil
        end
        socket
      rescue Errno::ECONNABORTED, Errno::EPROTO
        nil
      end

      # @return [String] REMOTE_ADDR for an accepted socket
      def remote_addr(socket)
        return "127.0.0.1" if @unix # Rack has no address for a Unix peer; Puma does the same
        Listener.ip_address(socket.remote_address)
      rescue SystemCallError
        "0.0.0.0"
      end

      # The numeric address of an Addrinfo, read from its sockaddr bytes. Addrinfo#ip_address
      # asks getnameinfo(3), which Ruby 3.3 runs on a thread of its own per call (so that it can
      # be interrupted): a thread created and joined for every accepted connection. The address
      # sits at the same offset in the BSD and Linux layouts (4 for IPv4, 8 for IPv6).
      # @param address [Addrinfo]
      # @return [String]
      def self.ip_address(address)
        sockaddr = address.to_sockaddr
        case address.afamily
        when Socket::AF_INET then sockaddr.unpack("@4C4").join(".")
        when Socket::AF_INET6 then IPAddr.new_ntoh(sockaddr.byteslice(8, 16)).to_s
        else address.ip_address
        end
      end

      # Stops listening (workers close their copy when they stop accepting).
      def close
        @socket.close unless @socket.closed?
      end

      # Removes a Unix socket's file (master only, at final exit).
      def unlink
        File.unlink(@address.path) if @unix && File.socket?(@address.path)
      rescue SystemCallError
        nil
      end

      private

      def build_ssl_context
        require "openssl"
        context = OpenSSL::SSL::SSLContext.new
        chain = File.read(@address.cert).scan(/-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----/m)
        context.cert = OpenSSL::X509::Certificate.new(chain.shift)
        context.extra_chain_cert = chain.map { |pem| OpenSSL::X509::Certificate.new(pem) } unless chain.empty?
        context.key = OpenSSL::PKey.read(File.read(@address.key))
        context.min_version = OpenSSL::SSL::TLS1_2_VERSION
        context.alpn_protocols = ["http/1.1"]
        context.freeze
        context
      end
    end
  end
end
