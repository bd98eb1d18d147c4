# frozen_string_literal: true

require_relative "test_helper"
require_relative "support/certificates"
require "weft/stream"
require "socket"

# Weft::Stream over real sockets (unix pairs, TCP for resets, TLS), in plain threads and in a
# reactor.
class StreamTest < Minitest::Test
  def setup
    @sockets = []
  end

  def teardown
    @sockets.each { |socket| socket.close unless socket.closed? }
  end

  def test_fill_appends_and_consume_drops_what_was_parsed
    stream, peer = pair
    peer.write("GET / HTTP/1.1\r\n\r\nNEXT")
    assert_equal 22, stream.fill(1)
    head_end = stream.buffer.index("\r\n\r\n") + 4
    stream.consume(head_end)
    assert_equal "NEXT", stream.buffer
    assert_equal Encoding::BINARY, stream.buffer.encoding
    peer.write(" more")
    stream.fill(1)
    assert_equal "NEXT more", stream.buffer
    stream.consume(stream.buffer.bytesize)
    assert_empty stream.buffer
  end

  def test_end_of_stream_is_nil_not_an_error
    stream, peer = pair
    assert_equal false, stream.fill_now, "nothing was sent yet"
    peer.write("last")
    peer.close
    assert_equal true, stream.fill_now
    assert_nil stream.fill_now
    assert_nil stream.fill(1)
    assert_equal "last", stream.read_partial(10, nil, 1)
    assert_nil stream.read_partial(10, nil, 1)
  end

  def test_read_partial_hands_out_buffered_bytes_first_then_reads_into_the_callers_string
    stream, peer = pair
    peer.write("headbody-1")
    stream.fill(1)
    stream.consume(4)
    into = String.new(encoding: Encoding::BINARY)
    assert_same into, stream.read_partial(4, into, 1)
    assert_equal "body", into
    assert_equal "-1", stream.read_partial(100, into, 1)
    assert_empty stream.buffer
    peer.write("-2")
    assert_same into, stream.read_partial(100, into, 1)
    assert_equal "-2", into
  end

  def test_streams_sharing_one_scratch_buffer_keep_their_own_bytes
    scratch = String.new(capacity: 64, encoding: Encoding::BINARY)
    first, first_peer = pair(scratch: scratch)
    second, second_peer = pair(scratch: scratch)
    first_peer.write("one")
    second_peer.write("two")
    first.fill(1)
    second.fill(1)
    first_peer.write("!")
    first.fill(1)
    assert_equal "one!", first.buffer
    assert_equal "two", second.buffer
  end

  def test_reading_and_consuming_allocate_no_objects
    stream, peer = pair(scratch: String.new(capacity: 16_384, encoding: Encoding::BINARY))
    request = "GET / HTTP/1.1\r\nhost: x\r\n\r\n"
    into = String.new(capacity: 16_384, encoding: Encoding::BINARY)
    sink = String.new(capacity: 16_384, encoding: Encoding::BINARY)
    cycle = lambda do
      peer.write(request)
      stream.fill_now
      stream.consume(stream.buffer.bytesize)
      peer.write(request)
      stream.read_partial(16_384, into, 1)
      stream.write(request, 1)
      peer.read_nonblock(100, sink, exception: false)
    end
    3.times { cycle.call } # warm up
    before = GC.stat(:total_allocated_objects)
    100.times { cycle.call }
    stream_objects = GC.stat(:total_allocated_objects) - before
    # Ruby's own read_nonblock into a given buffer allocates one object per call on 3.3 (none on
    # 3.1); a cycle reads twice. One object per cycle of the stream's own would add 100.
    assert_operator stream_objects, :<, (2 * objects_per_raw_read * 100) + 10
  end

  # @return [Float] objects this Ruby allocates for one IO#read_nonblock into a given buffer
  def objects_per_raw_read
    reader, writer = UNIXSocket.pair
    scratch = String.new(capacity: 16_384, encoding: Encoding::BINARY)
    data = "x" * 30
    read = lambda do
      writer.write(data)
      reader.read_nonblock(16_384, scratch, exception: false)
    end
    3.times { read.call }
    before = GC.stat(:total_allocated_objects)
    100.times { read.call }
    (GC.stat(:total_allocated_objects) - before).round(-1) / 100.0
  ensure
    reader&.close
    writer&.close
  end

  def test_write_sends_everything_a_slow_reader_takes
    stream, peer = pair
    data = Random.bytes(4 * 1024 * 1024)
    received = String.new(encoding: Encoding::BINARY)
    reader = Thread.new do
      while received.bytesize < data.bytesize
        received << peer.readpartial(65_536)
        sleep 0.0005 if received.bytesize < 1_000_000
      end
    end
    stream.write(data, 5)
    reader.join(10)
    assert_equal data.bytesize, received.bytesize
    assert_equal data, received
  end

  # Each read that meets the reset (#fill, #fill_now: the C read on a plain socket) says so
  def test_a_peer_that_resets_the_connection_is_one_error_with_the_errno_as_cause
    %i[fill fill_now].each do |read|
      stream = reset_stream
      error = assert_raises(Weft::ConnectionLost) { read == :fill ? stream.fill(1) : stream.fill_now }
      assert_kind_of Errno::ECONNRESET, error.cause
      assert_match(/ECONNRESET/, error.message)
      assert_kind_of Weft::Error, error
    end
    assert_same Weft::ConnectionLost, Weft::Server::Connection::ClientGone if defined?(Weft::Server::Connection)
  end

  def test_writing_to_a_peer_that_left_is_connection_lost
    stream, peer = pair
    peer.close
    error = assert_raises(Weft::ConnectionLost) { 10.times { stream.write("x" * 65_536, 1) } }
    assert_kind_of SystemCallError, error.cause
  end

  def test_a_closed_stream_reports_connection_lost_not_ioerror
    stream, = pair
    stream.close
    stream.close # idempotent
    assert_predicate stream, :closed?
    assert_raises(Weft::ConnectionLost) { stream.fill(1) }
    assert_raises(Weft::ConnectionLost) { stream.write("x", 1) }
    assert_equal :eof, stream.peek
  end

  def test_timeouts_in_seconds_and_deadlines_raise_connection_stalled
    stream, = pair
    started = Weft::Timers.now
    error = assert_raises(Weft::ConnectionStalled) { stream.fill(0.1) }
    assert_match(/no bytes arrived \(timeout of 0.1s exceeded\)/, error.message)
    assert_raises(Weft::ConnectionStalled) { stream.read_partial(10, nil, Weft::Deadline.after(0.1)) }
    elapsed = Weft::Timers.now - started
    assert_operator elapsed, :>=, 0.18
    assert_operator elapsed, :<, 2
    assert_raises(Weft::ConnectionStalled) { stream.fill(Weft::Deadline.after(0)) }
  end

  def test_a_write_the_peer_does_not_take_times_out
    stream, = pair
    started = Weft::Timers.now
    error = assert_raises(Weft::ConnectionStalled) { stream.write("x" * 8 * 1024 * 1024, 0.2) }
    assert_match(/the peer took no bytes/, error.message)
    assert_operator Weft::Timers.now - started, :<, 3
  end

  # The HTTP client's Budget is such a waiter: it decides how long each wait may last and what
  # to raise.
  def test_a_waiter_object_does_the_waiting_and_raises_its_own_error
    waiter = Class.new do
      attr_reader :calls

      def initialize
        @calls = []
      end

      def wait(io, operation, writable:)
        @calls << [io, operation, writable]
        raise ArgumentError, "out of budget" if @calls.size > 1
        io.wait_readable(1)
      end
    end.new
    stream, peer = pair
    writer = Thread.new { sleep 0.05; peer.write("x") } # the first wait sees it arrive
    assert_equal 1, stream.fill(waiter)
    writer.join # before teardown closes `peer` under a writer not yet back from its write
    assert_raises(ArgumentError) { 2.times { stream.fill(waiter) } }
    assert_equal [stream.to_io, :read, false], waiter.calls.first
  end

  def test_peek_tells_data_nothing_and_end_of_stream_apart_without_consuming
    stream, peer = pair
    assert_equal :none, stream.peek
    peer.write("x")
    assert_equal :data, stream.peek
    assert_equal :data, stream.peek, "peeking consumed the byte"
    stream.fill(1)
    assert_equal :none, stream.peek, "the buffer is not what peek looks at"
    peer.close
    assert_equal :eof, stream.peek
  end

  def test_take_buffered_empties_the_buffer
    stream, peer = pair
    peer.write("abcdef")
    stream.fill(1)
    assert_equal "ab", stream.take_buffered(2)
    assert_equal "cdef", stream.take_buffered
    assert_empty stream.buffer
    assert_equal "", stream.take_buffered
  end

  def test_tls_accept_and_connect_then_the_stream_speaks_tls
    server_side, client_side, ssl = tls_streams do |server|
      server.fill(5)
      server.write("pong:#{server.take_buffered}", 5)
    end
    client_side.write("ping", 5)
    @tls_server.join(5)
    assert client_side.tls? && server_side.tls?
    assert_same ssl, client_side.io
    client_side.fill(5)
    assert_equal "pong:ping", client_side.buffer
  end

  # On a plain socket #fill and #fill_now read with recv(2) from C (#recv_append): the socket's
  # read_nonblock is never called. Each answer: bytes, nothing yet, end of stream.
  def test_plain_sockets_are_read_with_one_recv
    stream, peer = pair(read_size: 4)
    def (stream.to_io).read_nonblock(*) = raise("read through Ruby's IO layer")
    assert_equal false, stream.fill_now, "nothing yet (EAGAIN)"
    peer.write("abcdef")
    assert_equal true, stream.fill_now
    assert_equal "abcd", stream.buffer, "at most read_size"
    assert_equal 2, stream.fill(1)
    assert_equal "abcdef", stream.buffer
    writer = Thread.new { sleep 0.05; peer.write("g") } # rubocop:disable Style/Semicolon
    assert_equal 1, stream.fill(5), "waits for the socket"
    writer.join # before closing: a close while the writer is still in IO#write raises there
    peer.close
    assert_nil stream.fill_now
    assert_nil stream.fill(1)
    assert_equal "abcdefg", stream.buffer
  end

  def test_fill_now_on_a_closed_socket_is_connection_lost_with_the_ioerror_as_cause
    stream, = pair
    stream.close
    error = assert_raises(Weft::ConnectionLost) { stream.fill_now }
    assert_kind_of IOError, error.cause
  end

  # What is not a socket (a pipe) goes through IO#read_nonblock, as TLS does.
  def test_an_io_that_is_not_a_socket_is_read_through_ruby
    reader, writer = IO.pipe
    @sockets << reader << writer
    stream = Weft::Stream.new(reader)
    assert_equal false, stream.fill_now
    writer.write("piped")
    assert_equal true, stream.fill_now
    assert_equal "piped", stream.buffer
  end

  # After the handshake the bytes on the socket are TLS records: reads go through OpenSSL.
  def test_tls_reads_stay_with_openssl
    server_side, client_side = tls_streams { |server| server.write("decrypted", 5) }
    @tls_server.join(5)
    client_side.fill(5) until client_side.buffer.bytesize >= 9
    assert_equal "decrypted", client_side.buffer
    assert_equal false, client_side.fill_now
    server_side.write("more", 5)
    sleep 0.05
    assert_equal true, client_side.fill_now
    assert_equal "decryptedmore", client_side.buffer
  end

  # A full hijack: bytes the peer sent beyond what was parsed come first from the IO's own
  # buffered reads; reads that would pass over them refuse.
  def test_hand_over_gives_the_io_with_the_buffered_bytes_first
    stream, peer = pair
    peer.write("HEAD\r\n\r\nframe-1")
    stream.fill(1)
    stream.consume(8)
    io = stream.hand_over
    assert_same stream.to_io, io
    assert_empty stream.buffer
    assert_raises(IOError) { io.sysread(1) }
    assert_raises(IOError) { io.recv(1) }
    assert io.wait_readable(0), "readable while bytes are buffered"
    assert_equal "frame", io.read_nonblock(5)
    io.write("answer") # a write leaves what is buffered
    assert_equal "answer", peer.readpartial(10)
    peer.write("+frame-2")
    assert_equal "-1", io.readpartial(2)
    assert_equal "+frame-2", io.readpartial(100)
  end

  def test_hand_over_under_tls
    _, client_side, ssl = tls_streams { |server| server.write("HEAD\r\n\r\nframe-1", 5) }
    @tls_server.join(5)
    client_side.fill(5) until client_side.buffer.bytesize >= 15
    client_side.consume(8)
    assert_same ssl, client_side.hand_over
    assert_equal "frame-1", ssl.readpartial(100)
  end

  def test_a_tls_handshake_that_never_comes_stalls_and_one_with_garbage_is_connection_lost
    certs = Weft::Test::Certificates.generate
    context = OpenSSL::SSL::SSLContext.new
    context.cert = certs[:cert]
    context.key = certs[:key]
    stream, peer = tcp_pair
    stream = Weft::Stream.new(stream)
    error = assert_raises(Weft::ConnectionStalled) { stream.accept_tls(context, Weft::Deadline.after(0.1)) }
    assert_match(/TLS handshake did not complete/, error.message)
    refute_predicate stream, :tls?

    stream, peer = tcp_pair
    stream = Weft::Stream.new(stream)
    peer.write("GET / HTTP/1.1\r\n\r\n")
    error = assert_raises(Weft::ConnectionLost) { stream.accept_tls(context, 1) }
    assert_kind_of OpenSSL::SSL::SSLError, error.cause
    assert_match(/TLS handshake/, error.message)
  end

  def test_in_a_reactor_a_waiting_read_parks_only_its_own_fiber
    slow, = pair
    fast, fast_peer = pair
    order = []
    Weft.run do
      waiting = Weft.spawn { assert_nil slow.fill(0.3) rescue order << :slow_timed_out } # rubocop:disable Style/RescueModifier
      Weft.spawn do
        fast_peer.write("now")
        fast.fill(1)
        order << :fast
      end
      waiting.wait
    end
    assert_equal %i[fast slow_timed_out], order
  end

  private

  # @return [Array(Weft::Stream, UNIXSocket)] a stream and its peer
  def pair(**options)
    ours, theirs = UNIXSocket.pair
    @sockets << ours << theirs
    [Weft::Stream.new(ours, **options), theirs]
  end

  # A TLS connection between two streams over TCP, the server side's handshake (then `server`'s
  # block) in @tls_server, a thread.
  # @return [Array(Weft::Stream, Weft::Stream, OpenSSL::SSL::SSLSocket)] the server's stream,
  #   the client's, and the client's SSLSocket
  def tls_streams(&server)
    certs = Weft::Test::Certificates.generate
    server_side, client_side = tcp_pair.map { |socket| Weft::Stream.new(socket) }
    server_context = OpenSSL::SSL::SSLContext.new
    server_context.cert = certs[:cert]
    server_context.key = certs[:key]
    client_context = OpenSSL::SSL::SSLContext.new
    client_context.set_params(verify_mode: OpenSSL::SSL::VERIFY_PEER, ca_file: certs[:ca_file])
    @tls_server = Thread.new do
      server_side.accept_tls(server_context, 5)
      server.call(server_side)
    end
    ssl = OpenSSL::SSL::SSLSocket.new(client_side.to_io, client_context)
    ssl.hostname = "localhost"
    client_side.connect_tls(ssl, Weft::Deadline.after(5))
    [server_side, client_side, ssl]
  end

  # @return [Weft::Stream] over a TCP socket whose peer closed it with a reset
  def reset_stream
    socket, peer = tcp_pair
    peer.setsockopt(Socket::SOL_SOCKET, Socket::SO_LINGER, [1, 0].pack("ii")) # close sends RST
    peer.close
    Weft::Stream.new(socket)
  end

  # @return [Array(Socket, Socket)] two connected TCP sockets
  def tcp_pair
    server = TCPServer.new("127.0.0.1", 0)
    client = Socket.tcp("127.0.0.1", server.addr[1])
    accepted = server.accept
    server.close
    @sockets << client << accepted
    [accepted, client]
  end
end
