# frozen_string_literal: true

require_relative "../errors"

module Weft
  module HTTP
    # Every failure the HTTP client raises includes this module, so `rescue Weft::HTTP::Error`
    # catches them all. It is a module rather than a base class because the timeouts must also
    # be Timeout::Errors (through Weft::TimeoutError): code written for Net::HTTP, Faraday or
    # Rack::Timeout rescues Timeout::Error, and a switch of client must not change that.
    module Error; end

    # The connection could not be opened, or broke while in use.
    class ConnectionError < Weft::Error
      include Error
    end

    # The host name did not resolve (getaddrinfo failed).
    class DNSError < ConnectionError; end

    # Nothing listens at the address (ECONNREFUSED, or a unix socket path without a listener).
    class ConnectionRefused < ConnectionError; end

    # The peer reset or closed the connection before the response was complete: mid-head,
    # mid-body, or before the end of a Content-Length body.
    class ConnectionReset < ConnectionError; end

    # The TLS handshake failed.
    class TLSError < ConnectionError; end

    # The server's certificate did not verify (unknown CA, expired, wrong host name). Kept
    # apart from other TLS failures because it usually means a misconfiguration or an attack,
    # never a transient fault worth retrying.
    class TLSVerificationError < TLSError; end

    # The proxy refused the CONNECT tunnel.
    class ProxyError < ConnectionError; end

    # The response violates HTTP/1.1 (bad status line or header, bad chunk framing, a gzip
    # body that does not inflate).
    class MalformedResponse < Weft::Error
      include Error
    end

    # More redirects than `follow:` allows.
    class TooManyRedirects < Weft::Error
      include Error
    end

    # Base of every client timeout. A Weft::TimeoutError, and so a Timeout::Error.
    class TimeoutError < Weft::TimeoutError
      include Error
    end

    # Resolving, connecting and the TLS handshake together took longer than `connect_timeout`.
    class ConnectTimeout < TimeoutError; end

    # One read waited longer than `read_timeout` for bytes.
    class ReadTimeout < TimeoutError; end

    # One write waited longer than `write_timeout` for the peer to accept bytes.
    class WriteTimeout < TimeoutError; end

    # No connection to the origin became free in the pool within `pool_timeout`.
    class PoolTimeout < TimeoutError; end

    # The request's total `deadline:` passed (whatever it was waiting for at the time).
    class DeadlineExceeded < TimeoutError; end
  end
end
