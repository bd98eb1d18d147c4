# frozen_string_literal: true

require "socket"
require "io/wait"
require "openssl"
require_relative "errors"
require_relative "deadline"
require_relative "native_extension"
Weft::NativeExtension.require(__dir__, "weft_readiness") # #recv_append (ext/weft_readiness/stream_recv.c)

module Weft
  # A connected socket (TCP or unix, plain or TLS) with a read buffer: the one piece of I/O under
  # both the server's connections and the HTTP client's. Protocol code parses #buffer in place,
  # drops what it used with #consume, and asks for more with #fill; bodies are read with
  # #read_partial into the caller's own buffer; messages go out whole with #write.
  #
  #   stream = Weft::Stream.new(socket)
  #   stream.connect_tls(OpenSSL::SSL::SSLSocket.new(stream.to_io, context), 5) # optional
  #   stream.write("PING\r\n", 5)
  #   stream.fill(5) until (line_end = stream.buffer.index("\r\n"))
  #   line = stream.buffer.byteslice(0, line_end)
  #   stream.consume(line_end + 2)
  #
  # All I/O is non-blocking, with waits on the socket: inside a reactor a wait parks the fiber,
  # in a plain thread it is poll(2). What bounds a wait is the `timeout` argument of each call:
  #
  # - nil: no limit;
  # - Numeric: seconds for each wait, so a peer that keeps making progress never runs out;
  # - Weft::Deadline: the whole call must be done by then;
  # - any other object: a waiter, `wait(io, operation, writable:)`, that waits on `io` itself and
  #   raises its own error when time runs out (the HTTP client's Budget, whose limits depend on
  #   the phase of the request). `operation` is :read, :write or :connect (the TLS handshake),
  #   `writable` what the socket must become (TLS can need the opposite direction).
  #
  # Errors: a wait that runs out raises Weft::ConnectionStalled; every way the peer can go away
  # (reset, broken pipe, an errno of a dead connection, IOError, a TLS failure) raises
  # Weft::ConnectionLost, with the original exception as its cause. End of stream is not an
  # error: the reads return nil, and the caller decides what an early end means.
  #
  # Allocation: reads land in a scratch String, which the caller can share between streams (the
  # server has one for all its connections, so an idle connection holds no read buffer), and are
  # appended to #buffer; #read_partial reads straight into the caller's String. No read makes a
  # new String. #consume of the whole buffer empties it in place; of part of it, it keeps the
  # rest as a shared substring, so the bytes are not copied then (only if more are appended).
  #
  # On a plain socket #fill and #fill_now read with one recv(2) from C (#recv_append, in core's
  # extension): the system call of IO#read_nonblock, without its Ruby calls around it (the
  # keyword argument, the result's test, the append). Under TLS they read through OpenSSL.
  class Stream
    # The errors that mean the connection is gone. ENOTCONN: the peer's reset raced our read on
    # some kernels; ECONNABORTED/ETIMEDOUT: the kernel gave up on it; IOError: closed under us
    # (EOFError is one); SSLError: a broken or truncated TLS record, a failed handshake.
    PEER_GONE = [Errno::ECONNRESET, Errno::ECONNABORTED, Errno::EPIPE, Errno::ENOTCONN, Errno::ETIMEDOUT,
                 Errno::ESHUTDOWN, IOError, OpenSSL::SSL::SSLError].freeze
    # What a timed-out wait was doing, for ConnectionStalled's message.
    STALLED = { read: "no bytes arrived", write: "the peer took no bytes", connect: "the TLS handshake did not complete" }.freeze
    private_constant :STALLED

    # @return [String] bytes received and not consumed yet (binary). Parse it in place, then
    #   #consume what was used. The object changes after #consume and #take_buffered: read it
    #   from the stream each time rather than keeping it.
    attr_reader :buffer

    # @return [Socket, OpenSSL::SSL::SSLSocket] what the bytes go through: the socket, or the
    #   SSLSocket over it after a handshake (what a hijacking app gets)
    attr_reader :io

    # @param socket [Socket, IO] connected, non-blocking capable
    # @param read_size [Integer] most bytes one read asks the socket for
    # @param scratch [String, nil] where reads land before they are appended to the buffer; pass
    #   one shared by streams used from one thread to keep idle streams small. Without it the
    #   stream makes its own, on the first read that needs one.
    def initialize(socket, read_size: 16_384, scratch: nil)
      @socket = socket
      @io = socket
      @read_size = read_size
      @scratch = scratch
      @buffer = String.new(encoding: Encoding::BINARY)
      # Whether #fill and #fill_now read with recv(2) (#recv_append): a socket, until TLS.
      @recv = socket.is_a?(BasicSocket)
    end

    # @return [String] TLS or not, the bytes buffered and whether closed, for logs and the console
    def inspect
      "#<#{self.class.name} #{tls? ? 'tls' : 'plain'} buffered=#{@buffer.bytesize}#{' closed' if closed?}>"
    end

    # @return [Socket] the kernel socket, for readiness waits and registrations
    def to_io
      @socket
    end

    # @return [Boolean] whether a TLS handshake has been made
    def tls?
      !@io.equal?(@socket)
    end

    # Runs the server side of a TLS handshake; afterwards the stream speaks TLS.
    # @param context [OpenSSL::SSL::SSLContext]
    # @param timeout [nil, Numeric, Deadline, #wait] see the class comment
    # @return [OpenSSL::SSL::SSLSocket]
    # @raise [ConnectionLost, ConnectionStalled]
    def accept_tls(context, timeout)
      ssl = OpenSSL::SSL::SSLSocket.new(@socket, context)
      ssl.sync_close = true
      handshake(ssl, true, timeout)
    end

    # Runs the client side of a TLS handshake on an SSLSocket the caller made over #to_io (and
    # gave its host name and session); afterwards the stream speaks TLS.
    # @param ssl [OpenSSL::SSL::SSLSocket]
    # @param timeout [nil, Numeric, Deadline, #wait] see the class comment
    # @return [OpenSSL::SSL::SSLSocket]
    # @raise [ConnectionLost, ConnectionStalled]
    def connect_tls(ssl, timeout)
      handshake(ssl, false, timeout)
    end

    # Appends at least one byte to #buffer, waiting for it within `timeout`.
    # @return [Integer, nil] bytes appended; nil at end of stream
    # @raise [ConnectionLost, ConnectionStalled]
    def fill(timeout)
      scratch = @scratch || own_scratch
      if @recv
        # 0: nothing yet (a while loop: returning from a block allocates)
        while (count = recv_append(@socket, @buffer, scratch, @read_size)) == 0
          await(timeout, :read, false)
        end
        count
      elsif (piece = receive(@read_size, scratch, timeout))
        @buffer << piece
        piece.bytesize
      end
    rescue *PEER_GONE => e
      raise ConnectionLost, lost_message(e)
    end

    # Appends to #buffer what the socket (or TLS) holds already, without waiting.
    # @return [Boolean, nil] whether bytes arrived; nil at end of stream
    # @raise [ConnectionLost]
    def fill_now
      scratch = @scratch || own_scratch
      if @recv
        count = recv_append(@socket, @buffer, scratch, @read_size)
        return count && count > 0
      end
      case @io.read_nonblock(@read_size, scratch, exception: false)
      when String
        @buffer << scratch
        true
      when nil then nil
      else false
      end
    rescue *PEER_GONE => e
      raise ConnectionLost, lost_message(e)
    end

    # Reads up to `size` bytes: those in #buffer first (they are consumed), else from the socket
    # straight into `into`, waiting within `timeout`. For bodies, which need no parsing.
    # @param into [String, nil] a buffer to read into (its content is replaced), or nil for a
    #   new String
    # @return [String, nil] the bytes (`into` when given); nil at end of stream
    # @raise [ConnectionLost, ConnectionStalled]
    def read_partial(size, into, timeout)
      return take_buffered(size, into) unless @buffer.empty?
      receive(size, into, timeout)
    end

    # Drops the first `count` bytes of #buffer (what the parser used).
    def consume(count)
      if count >= @buffer.bytesize
        @buffer.clear # the common case: all of it, and the String is kept
      else
        @buffer = @buffer.byteslice(count, @buffer.bytesize - count)
      end
      nil
    end

    # Takes bytes out of #buffer.
    # @param count [Integer] at most this many
    # @param into [String, nil] a buffer for them (its content is replaced), or nil for a new String
    # @return [String] the bytes (`into` when given), empty when none are buffered
    def take_buffered(count = @buffer.bytesize, into = nil)
      if count < @buffer.bytesize
        piece = @buffer.byteslice(0, count)
        consume(count)
        return into ? into.replace(piece) : piece
      end
      if into
        into.replace(@buffer)
        @buffer.clear
        return into
      end
      piece = @buffer
      @buffer = String.new(encoding: Encoding::BINARY)
      piece
    end

    # Writes all of `data`, waiting for the peer to take it within `timeout`.
    # @raise [ConnectionLost, ConnectionStalled]
    def write(data, timeout)
      until data.empty?
        written = @io.write_nonblock(data, exception: false)
        if written.is_a?(Integer)
          return if written == data.bytesize # the common case: all at once
          data = data.byteslice(written, data.bytesize - written)
        else
          await(timeout, :write, written == :wait_writable)
        end
      end
    rescue *PEER_GONE => e
      raise ConnectionLost, lost_message(e)
    end

    # What waits in the socket, found without blocking or consuming anything (#buffer is not
    # looked at): one recv(MSG_PEEK), after the bytes TLS has decrypted already.
    # @return [Symbol] :data (bytes are waiting), :none (nothing yet) or :eof (the peer closed
    #   the connection, or it broke)
    def peek
      return :data if tls? && @io.pending.positive?
      case (data = @socket.recv_nonblock(1, Socket::MSG_PEEK, exception: false))
      when :wait_readable then :none
      when String then data.empty? ? :eof : :data
      else :eof
      end
    rescue IOError, SystemCallError
      :eof
    end

    # Hands the connection to code that reads the IO itself (a full hijack). The bytes in #buffer
    # (what the peer sent beyond what was parsed) are pushed back into the IO's own read buffer,
    # so its buffered reads (read, readpartial, read_nonblock, gets, each_line; the same on an
    # SSLSocket) return them first. Reads that bypass that buffer refuse to run while it holds
    # bytes (IO#sysread, BasicSocket#recv raise IOError "... for buffered IO") rather than skip
    # them. The stream must not be read afterwards.
    # @return [Socket, OpenSSL::SSL::SSLSocket] #io
    def hand_over
      unless @buffer.empty?
        if tls?
          # OpenSSL::Buffering#ungetc takes one character: the bytes one at a time, last first.
          # Quadratic in their number, which is small: what arrived with the request's last read.
          @buffer.each_byte.reverse_each { |byte| @io.ungetc(byte.chr) }
        else
          @io.ungetbyte(@buffer)
        end
        @buffer = String.new(encoding: Encoding::BINARY)
      end
      @recv = false # a recv(2) would pass over the pushed-back bytes
      @io
    end

    # Closes the connection (TLS without waiting for the peer's close_notify). Idempotent;
    # never raises, never blocks.
    def close
      @io.close unless @io.closed?
      @socket.close unless @socket.closed?
    rescue IOError, SystemCallError, OpenSSL::SSL::SSLError
      nil
    end

    # @return [Boolean]
    def closed?
      @socket.closed?
    end

    private

    # Reads up to `size` bytes from the socket into `into`, waiting within `timeout`.
    # @return [String, nil] nil at end of stream
    def receive(size, into, timeout)
      # A while loop, not Kernel#loop: returning from a block allocates.
      while (piece = @io.read_nonblock(size, into, exception: false)).is_a?(Symbol)
        await(timeout, :read, piece == :wait_writable)
      end
      piece
    rescue *PEER_GONE => e
      raise ConnectionLost, lost_message(e)
    end

    def handshake(ssl, accepting, timeout)
      while (step = accepting ? ssl.accept_nonblock(exception: false) : ssl.connect_nonblock(exception: false)).is_a?(Symbol)
        await(timeout, :connect, step == :wait_writable)
      end
      @io = ssl
      @recv = false # the socket carries TLS records now
      ssl
    rescue *PEER_GONE, SystemCallError => e
      raise ConnectionLost, "#{lost_message(e)} (during the TLS handshake)"
    end

    # Waits until the socket is readable (or writable), within `timeout`.
    def await(timeout, operation, writable)
      case timeout
      when nil, Numeric
        seconds = timeout
      when Deadline
        seconds = timeout.remaining
        raise ConnectionStalled, stalled_message(operation, timeout) if seconds.zero?
      else
        return timeout.wait(@socket, operation, writable: writable)
      end
      return if writable ? @socket.wait_writable(seconds) : @socket.wait_readable(seconds)
      raise ConnectionStalled, stalled_message(operation, timeout)
    end

    def stalled_message(operation, timeout)
      limit = timeout.is_a?(Deadline) ? timeout.message : "timeout of #{timeout}s exceeded"
      "#{STALLED.fetch(operation)} (#{limit})"
    end

    def lost_message(error)
      error.is_a?(EOFError) ? "end of stream" : "#{error.class}: #{error.message}"
    end

    def own_scratch
      @scratch = String.new(capacity: @read_size, encoding: Encoding::BINARY)
    end
  end
end
