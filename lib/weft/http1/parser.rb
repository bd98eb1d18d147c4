# frozen_string_literal: true

require_relative "../errors"

module Weft
  # HTTP/1.x framing shared by the server and the client: the C head parsers, chunked
  # decoding and response serialization (ext/weft_http1).
  module HTTP1
    # Raised for malformed or oversized HTTP/1.x input. #status is the HTTP
    # status a server should answer with (400, 413, 414, 431, 501, 505);
    # the response parser always uses 502.
    class ParseError < StandardError
      include Weft::Error

      # @return [Integer] the HTTP status a server answers the malformed request with
      attr_reader :status

      # @param message [String]
      # @param status [Integer] see #status
      def initialize(message = "malformed HTTP message", status = 400)
        super(message)
        @status = status
      end
    end
  end
end

require_relative "../native_extension"
Weft::NativeExtension.require(__dir__, "weft_http1")

module Weft
  module HTTP1
    # Incremental request-head parser (C). See docs/http1_parser.md.
    class RequestParser
      # @param max_request_line [Integer] bytes of the request line at most (past it: 414)
      # @param max_header_bytes [Integer] bytes of the head at most (past it: 431)
      # @param max_headers [Integer] header lines at most (past it: 431)
      def initialize(max_request_line: 8192, max_header_bytes: 65_536, max_headers: 100)
        _setup(max_request_line, max_header_bytes, max_headers)
      end
    end

    # Incremental response-head parser for the client (C).
    class ResponseParser
      # @param max_header_bytes [Integer] bytes of the head at most
      # @param max_headers [Integer] header lines at most
      def initialize(max_header_bytes: 65_536, max_headers: 100)
        _setup(max_header_bytes, max_headers)
      end
    end

    # Decoder for the chunked transfer coding (C).
    class ChunkedDecoder
      # @param max_chunk_size [Integer, nil] largest single chunk (nil: no limit)
      # @param max_body_size [Integer, nil] largest body, all chunks together (nil: no limit).
      #   A chunk that would exceed either is refused with a 413 ParseError as soon as its size
      #   line is complete, before any of its data arrives.
      # @param max_trailer_bytes [Integer] largest trailer section
      def initialize(max_chunk_size: nil, max_body_size: nil, max_trailer_bytes: 16_384)
        _setup(max_chunk_size, max_body_size, max_trailer_bytes)
      end
    end
  end
end
