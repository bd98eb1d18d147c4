# frozen_string_literal: true

require_relative "../errors"

module Weft
  module HTTP
    # Every failure the HTTP client raises includes this module, so `rescue Weft::HTTP::Error`
    # catches them all (and, as it includes Weft::Error, so does `rescue Weft::Error`). It is a
    # module rather than a base class because the timeouts must also be Timeout::Errors (through
    # Weft::TimeoutError): code written for Net::HTTP, Faraday or Rack::Timeout rescues
    # Timeout::Error, and a switch of client must not change that.
    module Error
      include Weft::Error
    end

    # The connection could not be opened, or broke while in use.
    class ConnectionError < StandardError
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
    class MalformedResponse < StandardError
      include Error
    end

    # More redirects than `follow:` allows.
    class TooManyRedirects < StandardError
      include Error
    end

    # The response cannot be matched to the request: the connection was reused and another
    # response already sat behind this one, so the server has answered more often than it was
    # asked (an earlier reply nobody asked for) and this response may answer an earlier request.
    # The connection is retired.
    class ResponseDesync < MalformedResponse; end

    # The response body is larger than `max_body_size` (by its Content-Length, or by the bytes
    # read). The connection is retired.
    class BodyTooLarge < StandardError
      include Error
    end

    # Included by every client timeout, so `rescue Weft::HTTP::TimeoutError` catches them all.
    # A module, since the deadline error must be a Weft::DeadlineExceeded while the others are
    # plain Weft::TimeoutError instances; all of them are Timeout::Errors.
    module TimeoutError
      include Error
    end

    # Resolving, connecting and the TLS handshake together took longer than `connect_timeout`.
    class ConnectTimeout < Weft::TimeoutError
      include TimeoutError
    end

    # One read waited longer than `read_timeout` for bytes.
    class ReadTimeout < Weft::TimeoutError
      include TimeoutError
    end

    # The response head was not complete within `header_timeout` of sending the request, though
    # bytes kept coming (a server trickling its head).
    class HeaderTimeout < ReadTimeout; end

    # The response body was not complete within `body_timeout` of its head.
    class BodyTimeout < ReadTimeout; end

    # One write waited longer than `write_timeout` for the peer to accept bytes.
    class WriteTimeout < Weft::TimeoutError
      include TimeoutError
    end

    # No connection to the origin became free in the pool within `acquire_timeout`.
    class PoolTimeout < Weft::TimeoutError
      include TimeoutError
    end

    # The request's total deadline passed: its own `deadline:`, or the caller's (Weft.deadline
    # around the request or around the task that spawned it), whichever came first; the message
    # says which. A Weft::DeadlineExceeded, so `rescue Weft::DeadlineExceeded` around a block of
    # work catches the client's expiry along with every other wait's.
    class DeadlineExceeded < Weft::DeadlineExceeded
      include TimeoutError
    end
  end
end
