# frozen_string_literal: true

require "objspace"
require "stringio"
require "openssl"
require "weft/http1/parser"
require_relative "request_body"
require_relative "response_writer"
require_relative "../errors"
require_relative "../stream"

module Weft
  class Server
    # One accepted client connection: reads requests off it, runs the app for each, writes the
    # responses in order, and between requests parks itself in the IdlePool so that an idle
    # keep-alive connection holds no fiber.
    #
    # A Connection runs in at most one task at a time: the task that reads and answers requests
    # until none is buffered, then ends after parking the connection.
    #
    # It knows its server only as a ConnectionHost (settings, the Rack adapter, parking, the
    # graceful stop, statistics): that class lists the whole interface.
    #
    # HTTP1::FastPath#serve (C) runs a plain request for it, with what it needs passed in as
    # arguments (#serve_one). Of the connection itself it uses two methods, both here and public:
    #
    #   call_app    once a head is parsed and its env built: the one call from C back into
    #               Ruby per request, which drops the head from the stream, counts the request
    #               as started, names it for the StallDetector and calls the app
    #   detached?   after the app: whether it hijacked the socket (then nothing is written)
    class Connection
      # The client went away or broke the connection (EOF, reset, broken pipe): the stream's
      # Weft::ConnectionLost under the server's name.
      ClientGone = Weft::ConnectionLost
      # The client took too long (answered with 408 when nothing was sent yet): the stream's
      # Weft::ConnectionStalled under the server's name.
      ClientTimeout = Weft::ConnectionStalled

      READ_SIZE = 16_384
      CONTINUE = "HTTP/1.1 100 Continue\r\n\r\n"
      # After an error answer to a request whose body is still arriving, the rest of the body is
      # read and dropped for at most this many seconds and bytes before the connection closes
      # (#linger).
      LINGER_SECONDS = 2
      LINGER_BYTES = 1_048_576

      # @return [String] the peer address for REMOTE_ADDR and the access log
      attr_reader :remote_addr
      # @return [Integer] requests answered on this connection
      attr_reader :requests
      # @return [Listener]
      attr_reader :listener
      # @return [Float] when (Timers.now) the connection last became idle: accepted, or its last
      #   response written
      attr_reader :idle_since
      # @return [Hash, nil] the env of the request being answered, for the StallDetector. Set
      #   by #run or #call_app before the app is called; cleared by #serve_one.
      attr_reader :env

      # @param host [ConnectionHost] everything of the server this connection uses
      # @param socket [Socket] the accepted socket
      # @param listener [Listener] where it was accepted
      def initialize(host, socket, listener)
        @host = host
        @socket = socket
        # Reads land in the server's one scratch buffer, so an idle connection holds none.
        @stream = Weft::Stream.new(socket, read_size: READ_SIZE, scratch: host.read_buffer)
        @listener = listener
        @remote_addr = listener.remote_addr(socket)
        @settings = host.settings
        @statistics = host.statistics
        @parser = HTTP1::RequestParser.new(max_request_line: @settings.max_request_line,
                                           max_header_bytes: @settings.max_header_bytes,
                                           max_headers: @settings.max_headers)
        # The one-call path for plain requests (RackAdapter#fast_path), on plain sockets: under
        # TLS the bytes go through OpenSSL, which only the Ruby path writes to.
        @fast_path = host.rack.fast_path unless listener.ssl?
        if @fast_path
          @env_template = host.rack.env_template(listener)
          @app = host.rack.app
        end
        @requests = 0
        @closed = false
        @detached = false
        @tls = listener.ssl? # the handshake comes first (#start)
        @idle_since = Timers.now
        @head_deadline = nil # while part of a head has arrived: when the rest is due
        @linger_deadline = nil # while parked after a 408 (#linger_parked): when to stop reading
        @head_parked = false # whether a partial head was parked (held against partial_head_budget)
      end

      # @return [String] the peer's address and the requests served, for logs and the console
      def inspect
        "#<#{self.class.name} #{@remote_addr} requests=#{@requests}#{' closed' if @closed}>"
      end
      alias to_s inspect

      # @return [#call] rack.hijack (full hijack)
      def hijack_proc
        @hijack_proc ||= method(:hijack)
      end

      # @return [IO] the socket the IdlePool watches
      def to_io
        @socket
      end

      # @return [Boolean]
      def closed?
        @closed
      end

      # Starts serving a newly accepted connection (in its own task). A TLS client that has
      # sent nothing yet is parked until it does, as a silent plain connection is (#serve parks
      # it at once): it holds no fiber meanwhile, and can be closed to admit a new client at
      # max_connections. Its handshake waiting in the task, a TLS server full of silent clients
      # made each new one wait for their header_timeout (tls_handshake_test.rb).
      def start
        return serve(@settings.first_data_timeout) unless @tls
        return @host.park(self, @settings.first_data_timeout) if @stream.peek == :none && !@host.stopping?
        serve(@settings.first_data_timeout) if handshake
      end

      # Called by the IdlePool in a new task once the parked socket is readable: a TLS client's
      # first bytes (the handshake comes first), a request, or what a client still sends after
      # its 408 (#linger_parked).
      def resume
        return drop_lingering if @linger_deadline
        return serve(@settings.idle_timeout) unless @tls && !@stream.tls?
        serve(@settings.first_data_timeout) if handshake
      end

      # Called by the IdlePool from the loop fiber when a parked connection stayed silent past
      # its timeout: keep-alive connections are simply closed (RFC 9112 §9.5). One parked with
      # part of a request head (see #read_head) gets a 408 first, if the socket takes it at
      # once, and lingers, parked, for what the client still sends (#linger_parked). One that
      # lingered so is closed. Must not block.
      def idle_expired
        return close unless @head_deadline && !@linger_deadline
        refuse_head(408, "request head not received in time")
      end

      # Called by the server (from the loop fiber, or the task of another connection) when this
      # one, parked with a partial head, is dropped to keep partial_head_budget: answered with a
      # 431 if the socket takes it at once, and closed after a linger (#refuse_head). It has been
      # taken out of the IdlePool already. Must not block.
      def head_dropped
        refuse_head(431, "the server holds too many unfinished request heads")
      end

      # Whether request bytes are waiting in the socket: a parked connection must be served
      # rather than closed when they are, or the client, which sent its request on a connection
      # still open, sees it reset and cannot tell whether the request was processed. Never
      # blocks, consumes nothing (Weft::Stream#peek). Never true while lingering after a 408
      # (#linger_parked): what such a client sends is not a request, and at max_connections it
      # is closed to admit a new client rather than handed back to be read.
      # @return [Boolean]
      def pending_input?
        !@closed && !@linger_deadline && @stream.peek == :data
      end

      # Closes the socket (idempotent, never raises, never blocks). Also what a partial hijack
      # or streaming body's Server::Stream#close does, which ends the connection's count. The
      # count first: once the client sees the close, the server's figures say so too.
      def close
        return if @closed
        @closed = true
        release_head if @head_parked
        @host.forget(self, @hijacked)
        @stream.close
      end

      # Hands the socket to the application (full hijack): the server stops serving it, and
      # counts it until the app closes it (ConnectionHost#hand_over). Bytes the client sent
      # beyond the request (a pipelined request, the first frames of a WebSocket) come first
      # from the IO's buffered reads (Weft::Stream#hand_over). The socket is also set as
      # `rack.hijack_io`, where Rack 2 apps look for it (Rack 2's SPEC asks the server to set
      # it; Tubesock and older WebSocket adapters read it rather than the return value).
      # @return [IO] the socket; an OpenSSL::SSL::SSLSocket on a TLS listener
      def hijack
        io = detach.hand_over
        @env[RACK_HIJACK_IO] = io if @env
        io
      end

      # @return [Boolean] whether the app took the socket (hijack or streaming body). An
      #   attribute reader: HTTP1::FastPath asks it after every app call, and a reader costs C
      #   no Ruby frame.
      attr_reader :detached
      alias detached? detached

      # Called by HTTP1::FastPath#serve (from C) once it has parsed a head of `length` bytes from
      # the stream's buffer and built its env, to run the app: drops the head from the stream (the
      # env holds copies; a full hijack then hands over only the bytes beyond it), counts the
      # request as started (#serve_one ends it when the fast path answered, RackAdapter#finish
      # when it handed the request back), names it for the StallDetector, and calls the app.
      #
      # One call from C rather than five (Stream#consume, Statistics#request_started!, #env=, the
      # app, Statistics#request_finished!): every call from C into Ruby enters the VM anew, while
      # calls between Ruby methods stay inside it (and YJIT compiles them on Ruby 3.3). Measured
      # with the linger wait below in bench/results/server-connections.md: within the noise on
      # Ruby 3.1, about 0.5-0.9 µs a request on 3.3 + YJIT.
      # @return what the app returned
      def call_app(length, env)
        @stream.consume(length)
        @statistics.request_started!
        @env = env
        @app.call(env)
      end

      # @return [Boolean] whether the server is stopping: a response head written now says
      #   `connection: close` (see ResponseWriter)
      def server_stopping?
        @host.stopping?
      end

      # Hands the connection's stream to the application (partial hijack, streaming body): the
      # server stops serving the connection, the app reads and writes through Server::Stream,
      # and the connection counts until the app closes it (#close, or the socket itself after a
      # full hijack: ConnectionHost#hand_over). Once: a second call (an app calling rack.hijack
      # twice) returns the same stream.
      # @return [Weft::Stream] with the bytes received beyond the current request still buffered
      def detach
        unless @detached
          @detached = true
          @hijacked = @host.hand_over(self) unless @closed
        end
        @stream
      end

      # --- I/O primitives used by RequestBody, ResponseWriter and Stream ----------------------

      # Appends at least one byte from the socket to the buffer, waiting at most `timeout`
      # seconds.
      # @raise [ClientTimeout, ClientGone]
      def fill(timeout)
        @stream.fill(timeout) or raise ClientGone, "end of stream"
      end

      # Replaces the contents of `buffer` with the next bytes of the request (at least one, at
      # most `size`): those already buffered first, then the socket's, waiting at most `timeout`
      # seconds. A buffer the caller reuses costs no allocation per read: a 100 MB upload read
      # into fresh strings left ~80 MB of garbage.
      # @param buffer [String, nil] nil for a new String
      # @return [String] buffer (or the new String)
      # @raise [ClientTimeout, ClientGone]
      def read_into(buffer, timeout, size = READ_SIZE)
        @stream.read_partial(size, buffer, timeout) or raise ClientGone, "end of stream"
      end

      # Writes all of `data`, waiting at most write_timeout for the client to take each part.
      # @raise [ClientTimeout, ClientGone]
      def write(data)
        @stream.write(data, @settings.write_timeout)
      end

      private

      # The request loop. Runs while requests are buffered or arrive without delay, then parks.
      def serve(wait_timeout)
        # Names the request being answered if it stalls the reactor (fiber-local: the watchdog
        # sees the fiber that holds the reactor). Set per task rather than per request.
        Thread.current[StallDetector::REQUEST] = self
        # What the linger waits with (#read_available), found once per task rather than once per
        # request: the task's fiber does not change while it serves.
        waiter = Fiber.scheduler.coarse_waiter
        return unless read_available(wait_timeout, waiter)
        # `while true` rather than Kernel#loop: no block call per request, and the returns
        # below leave the method directly rather than by a throw out of a block.
        while true # rubocop:disable Style/InfiniteLoop
          keep_alive = serve_one
          return if @detached # hijacked: the socket is the app's now
          return if keep_alive == :parked # the rest of a head will wake it up
          return hang_up unless keep_alive
          # Timers.now inlined: one Ruby call fewer per request.
          @idle_since = Process.clock_gettime(Process::CLOCK_MONOTONIC)
          # True at once while a pipelined request is buffered: they are answered in order.
          return unless read_available(@settings.idle_timeout, waiter, speculative: false)
        end
      rescue ClientGone, ClientTimeout
        close
      rescue Exception => e # rubocop:disable Lint/RescueException
        close
        raise if e.is_a?(Cancelled) || !e.is_a?(StandardError)
        @host.log_error("connection #{@remote_addr}", e)
      ensure
        Thread.current[StallDetector::REQUEST] = nil
      end

      # Makes sure the buffer holds something (true at once if it does). A client that sends
      # its next request within `linger` seconds keeps this task; past that the connection is
      # parked in the IdlePool (no fiber) and false returned. Lingering pays because a busy
      # client's next request usually comes within milliseconds, and waiting for it in this
      # fiber costs one io_wait, where parking costs an epoll registration, a wake-up and a new
      # task (docs/server.md has the measurements).
      #
      # Only a connection that has carried two requests lingers: one that has not shown it
      # reuses connections (new, silent, or one request so far) is parked at once. A burst of
      # new clients would otherwise hold a fiber each for `linger`, and the stacks of fibers
      # that ran at the same time stay in the process's RSS for good (Ruby keeps freed fiber
      # stacks for reuse): 5,000 connections opened at once cost 107 MB that way.
      #
      # `speculative` tries a read before waiting: right for a new or just-woken connection, and
      # for TLS (decrypted bytes may be buffered). Just after a response the next request has
      # almost never arrived yet, so the read would only cost an EAGAIN syscall.
      #
      # During a graceful stop the connection is not parked: it waits in its fiber for the rest
      # of its drain grace, and is closed if no request came by then (see #drain).
      #
      # `waiter`: Scheduler#coarse_waiter of the fiber serving the connection.
      def read_available(park_timeout, waiter, speculative: true)
        return true unless @stream.buffer.empty?
        return true if (speculative || @tls) && fill_now
        return drain if @host.stopping?
        linger = @settings.linger
        # The reactor is asked directly, not through IO#wait_readable: that reaches the
        # scheduler from C (rb_io_wait, then a call into Ruby that enters the VM anew), which
        # every lingering fiber's stack also holds while it waits. A connection is only served
        # inside the server's reactor, and the socket's own read buffer, which IO#wait_readable
        # looks at first, is never used (reads are recv(2)).
        #
        # The wait is coarse (Scheduler#io_wait_coarse: it ends up to 10 ms past `linger`): a
        # linger needs no precision, and a busy connection renews its wait with every request,
        # which a timer per fiber paid for with a heap entry of its own that fired once per
        # linger (bench/results/server-connections.md).
        if linger&.positive? && @requests > 1 && waiter.wait_coarse(@socket, IO::READABLE, linger) && fill_now
          return true
        end
        return true if !speculative && fill_now # lingering was off: the one read not yet tried
        return drain if @host.stopping? # the stop began while this connection lingered
        @host.park(self, park_timeout)
        false
      end

      # Between requests during a graceful stop. The last response did not say
      # `connection: close` (it was written before the stop began), so the client may send
      # another request at any moment; closing at once would race with it, and a request that
      # meets a closed connection is lost without the client knowing whether it was processed.
      # So a connection idle for less than `drain_grace` waits for the rest of it (a request is
      # answered with `connection: close`), then closes: a client quiet for that long is idle.
      # @return [Boolean] whether a request arrived
      def drain
        remaining = @host.drain_remaining(self)
        @socket.wait_readable(remaining) if remaining.positive?
        return true if fill_now
        close
        false
      end

      # @return [Boolean] whether bytes arrived; raises ClientGone at EOF
      def fill_now
        filled = @stream.fill_now
        raise ClientGone, "end of stream" if filled.nil?
        filled
      end

      # Reads, runs and answers one request. A complete head with no body goes through the
      # fast path, in C (HTTP1::FastPath#serve: parse, env, app, response, send); it hands
      # back whatever it does not finish, at the point it stopped.
      # @return [Boolean, :parked] whether to keep the connection; :parked when it waits for
      #   the rest of a head in the IdlePool
      def serve_one
        if @fast_path && !@head_deadline # (a head begun earlier is finished by #read_head)
          begin
            answer = @fast_path.serve(self, @parser, @stream, @stream.buffer, @socket, @remote_addr, @env_template,
                                      @requests, @hijack_proc || hijack_proc) # no call once it is made
          rescue HTTP1::ParseError => e
            return parse_failed(e)
          end
          @requests += 1 unless answer.nil? # a head was parsed: it counted this request as the next
          case answer
          when true, false
            @statistics.request_finished! # answered: it was started in #call_app
            return answer
          when Hash then return run(answer) # a body to read, or a statistics endpoint
          when Array then return @host.rack.finish(self, *answer) # the app ran; its response is not plain
          end
          # nil: the head is not complete yet
        end
        env = read_head
        return env unless env.is_a?(Hash)
        @requests += 1
        run(env)
      ensure
        @env = nil # the request is done, whichever path ran it
      end

      # Reads the body of a request whose head is parsed (and counted), then runs and answers it.
      # @return [Boolean] whether to keep the connection
      def run(env)
        keep_alive = @parser.keep_alive? && @requests < @settings.max_requests_per_connection
        if (input = read_body(env)).nil?
          return false # answered with an error already
        end
        env[RACK_INPUT] = input
        @env = env
        @host.rack.call(self, env, keep_alive)
      end

      # A head that is not complete and has no more bytes waiting does not keep a fiber: the
      # connection is parked in the IdlePool until the rest arrives or header_timeout passes
      # (#idle_expired answers 408). The parser resumes where it stopped, and fills the env only
      # once the head is complete. A slowloris client used to hold a fiber per connection for
      # the whole header_timeout, and Ruby keeps the stacks of fibers that ran at the same time
      # (3,000 such connections: +64 MB of RSS, for good).
      # @return [Hash, false, :parked] the env with the head parsed, false after answering an
      #   error, :parked
      def read_head
        env = @host.rack.new_env(self)
        until (length = @parser.parse(@stream.buffer, env))
          @head_deadline ||= Timers.now + @settings.header_timeout
          remaining = @head_deadline - Timers.now
          raise ClientTimeout, "request head not complete" if remaining <= 0
          next if fill_now
          if @host.stopping?
            fill(remaining)
          else
            @head_parked = true
            @host.park_head(self, remaining, memory_held_by_head)
            return :parked
          end
        end
        @head_deadline = nil
        release_head if @head_parked
        @stream.consume(length) # the env holds copies
        env
      rescue HTTP1::ParseError => e
        parse_failed(e)
      rescue ClientTimeout
        # Slowloris: only answer a client that sent part of a head, and take what it still
        # sends for a while (#linger), so that the 408 is not lost to a reset. (This path runs
        # in a fiber during a graceful stop, or when a parked head's deadline passed as it
        # woke; #idle_expired answers the head that stays parked.)
        raise if @stream.buffer.empty?
        answer_error(408, "request head not received in time")
        linger
        false
      end

      # What the head parked so far holds, for partial_head_budget: its buffer's memory, not only
      # its bytes. A head that came behind a complete request in the same read is the tail of
      # that read's buffer (Stream#consume slices it, sharing the memory: no copy per pipelined
      # request), and as such kept the whole buffer alive: 29 bytes counted, the 60 KB head
      # before it held (test/server/partial_heads_test.rb). Parked, it gets memory of its own
      # first: String#setbyte makes a shared string independent (a copy of its bytes) and
      # changes nothing in one that is. The count includes the String's spare capacity.
      # @return [Integer] bytes
      def memory_held_by_head
        buffer = @stream.buffer
        buffer.setbyte(0, buffer.getbyte(0)) unless buffer.empty?
        ObjectSpace.memsize_of(buffer)
      end

      # @return [IO, nil] rack.input, or nil after answering an error
      def read_body(env)
        RequestBody.read(self, @parser, @stream.buffer, @settings) { write(CONTINUE) }
      rescue RequestBody::TooLarge => e
        answer_error(413, e.message)
        linger
      rescue RequestBody::SpoolFailed => e
        @host.log_error("request body from #{@remote_addr}", e)
        answer_error(500, "the request body could not be stored", server_fault: true)
        linger
      rescue HTTP1::ParseError => e
        @statistics.parse_error!
        answer_error(e.status, e.message)
        linger
      rescue ClientTimeout
        # The client may still be sending (slowly): its 408 is not to be lost to a reset.
        answer_error(408, "request body not received in time")
        linger
      end

      # A malformed or oversized head: answered with the status the parser chose.
      # @return [false] the connection is closed after it
      def parse_failed(error)
        @statistics.parse_error!
        answer_error(error.status, error.message)
        false
      end

      # Sends a short error response and marks the connection for closing. Counted as the
      # client's error unless `server_fault`.
      def answer_error(status, message, server_fault: false)
        server_fault ? @statistics.server_error! : @statistics.client_error!
        ResponseWriter.write_error(self, status, message)
      rescue ClientGone, ClientTimeout
        nil
      end

      # Ends the connection after its last response (one that said `connection: close`, or an
      # error answer). When the client has sent more than the server read (requests pipelined
      # behind one that closes the connection, the rest of a head or body refused), the rest is
      # taken first (#linger): a socket closed with unread bytes, or receiving more after the
      # close, makes the kernel send a reset, which throws away whatever of the response the
      # server's side had not sent yet (an 8 MB response lost its last 3 MB that way,
      # test/server/closing_test.rb). A client that sent nothing more is closed at once, as
      # nginx does (its `lingering_close on`): checking costs one peek.
      # @return [nil]
      def hang_up
        return close if @closed || (@stream.buffer.empty? && @stream.peek != :data)
        linger
      end

      # Reads and drops what the client still sends after the last response, then closes the
      # connection (#hang_up; after an error answer cut a request body short, read_body calls it
      # itself: a 413, a body that could not be stored, a malformed chunk). Closed at once, a
      # socket with unread bytes (or bytes still arriving) makes the kernel send a reset, and a
      # reset can destroy the answer before the client has read it (RFC 9112 section 9.6): the
      # client would see "connection reset" instead of the 413. On plain TCP the server's side
      # is shut down first, so the client sees the answer end, then what it sends is taken, for
      # at most LINGER_SECONDS and LINGER_BYTES (a client that sends on regardless costs one
      # waiting fiber that long). Never raises.
      # @return [nil] (read_body's "no input")
      def linger
        @socket.shutdown(Socket::SHUT_WR) unless @tls
        deadline = Weft::Deadline.after(LINGER_SECONDS)
        dropped = 0
        piece = nil # the first read makes it, the others refill it
        while dropped < LINGER_BYTES && (piece = @stream.read_partial(READ_SIZE, piece, deadline))
          dropped += piece.bytesize
        end
        nil
      rescue ClientGone, ClientTimeout, IOError, SystemCallError, OpenSSL::SSL::SSLError
        nil
      ensure
        close
      end

      # Answers a parked partial head that will not be served (`status` 408 or 431) if the socket
      # takes the answer at once, then lingers parked (#linger_parked), or closes when it does
      # not. Never blocks.
      def refuse_head(status, message)
        release_head
        @statistics.client_error!
        answer = ResponseWriter.error_response(status, message)
        written = @stream.io.write_nonblock(answer, exception: false)
        written == answer.bytesize ? linger_parked : close
      rescue IOError, SystemCallError, OpenSSL::SSL::SSLError
        close
      end

      # The partial head no longer counts against partial_head_budget.
      def release_head
        @head_parked = false
        @host.release_head(self)
      end

      # After a 408 written from the loop fiber (#idle_expired), which cannot wait: the server's
      # side is shut down and the connection parked again, for at most LINGER_SECONDS, so that
      # what the client still sends is read and dropped (#drop_lingering) rather than answered
      # with a reset, which can destroy the 408 (see #linger). It holds no fiber meanwhile, and
      # counts as idle: at max_connections it is among the first reclaimed. During a graceful
      # stop it is closed at once.
      def linger_parked
        return close if @host.stopping?
        @socket.shutdown(Socket::SHUT_WR) unless @tls
        @stream.buffer.clear
        @linger_deadline = Timers.now + LINGER_SECONDS
        @linger_left = LINGER_BYTES
        @host.park(self, LINGER_SECONDS)
      rescue IOError, SystemCallError
        close
      end

      # A connection lingering after its 408 (#linger_parked) got more bytes: they are dropped,
      # and it is parked again for the rest of its linger, or closed at the client's end of
      # stream, past LINGER_BYTES, past LINGER_SECONDS, or when the server stops.
      def drop_lingering
        while fill_now
          @linger_left -= @stream.buffer.bytesize
          @stream.buffer.clear
          break if @linger_left <= 0
        end
        remaining = @linger_deadline - Timers.now
        return close if @linger_left <= 0 || remaining <= 0 || @host.stopping?
        @host.park(self, remaining)
      rescue ClientGone, IOError, SystemCallError, OpenSSL::SSL::SSLError
        close
      end

      # The TLS handshake, within header_timeout. A client that does not complete it (stalled,
      # gone, speaking plain HTTP to the TLS port) is closed: its failure used to escape the task
      # with the socket open and the connection counted for good, so that max_connections port
      # scans left a TLS server accepting no one (test/server/tls_handshake_test.rb).
      # @return [Boolean] whether the connection speaks TLS now
      def handshake
        @stream.accept_tls(@listener.ssl_context, Weft::Deadline.after(@settings.header_timeout))
        true
      rescue ClientGone, ClientTimeout
        close
        false
      rescue Exception # rubocop:disable Lint/RescueException
        close
        raise
      end

      RACK_INPUT = "rack.input"
      RACK_HIJACK_IO = "rack.hijack_io"
    end
  end
end
