# frozen_string_literal: true

require_relative "../test_helper"
require_relative "support/server_helpers"
require "digest"

class ServerRequestBodyTest < Minitest::Test
  include Weft::Test::ServerHelpers

  # Answers with the body's size, its SHA-256 and the class of rack.input.
  ECHO = lambda do |env|
    input = env["rack.input"]
    digest = Digest::SHA256.new
    size = 0
    while (chunk = input.read(65_536))
      digest << chunk
      size += chunk.bytesize
    end
    [200, { "content-type" => "text/plain" }, ["#{size} #{digest.hexdigest} #{input.class}"]]
  end

  # rack.input as the server hands it over (Rack::Lint wraps it).
  INPUT_CLASS = lambda do |env|
    [200, {}, [env["rack.input"].class.name]]
  end

  def test_content_length_body
    with_server(ECHO) do |_, port|
      response = Net::HTTP.start("127.0.0.1", port) { |http| http.post("/", "hello world") }
      assert_equal "11 #{Digest::SHA256.hexdigest('hello world')} Rack::Lint::Wrapper::InputWrapper", response.body
    end
  end

  def test_chunked_body_and_pipelined_request_after_it
    with_server(ECHO) do |_, port|
      socket = connect(port)
      socket.write("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\n\r\n" \
                   "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc")
      assert_equal "11 #{Digest::SHA256.hexdigest('hello world')}", read_response(socket).body.split[0, 2].join(" ")
      assert_equal "3 #{Digest::SHA256.hexdigest('abc')}", read_response(socket).body.split[0, 2].join(" ")
    end
  end

  # A request without a body gets the one shared EmptyInput, which reads like an empty IO (and
  # passes Rack::Lint, which with_server wraps every app in).
  def test_bodyless_request_reads_as_empty
    reads = lambda do |env|
      input = env["rack.input"]
      buffer = +"stale"
      lines = []
      input.each { |line| lines << line }
      answers = [input.read.inspect, input.read(10).inspect, input.read(nil, buffer).inspect, buffer.inspect,
                 input.gets.inspect, lines.inspect]
      [200, {}, [answers.join(" ")]]
    end
    with_server(reads) do |_, port|
      2.times do # the shared input stays as it was after a request read (and closed) it
        response = Net::HTTP.start("127.0.0.1", port) { |http| http.get("/") }
        assert_equal '"" nil "" "" nil []', response.body
      end
    end
    with_server(INPUT_CLASS, lint: false) do |_, port|
      response = Net::HTTP.start("127.0.0.1", port) { |http| http.get("/") }
      assert_equal "Weft::Server::EmptyInput", response.body
    end
  end

  def test_large_body_is_spooled_to_a_file
    data = Random.new(1).bytes(3 * 1024 * 1024)
    with_server(INPUT_CLASS, lint: false, spool_threshold: 100_000) do |_, port|
      response = Net::HTTP.start("127.0.0.1", port) { |http| http.post("/", data) }
      assert_equal "Tempfile", response.body
      response = Net::HTTP.start("127.0.0.1", port) { |http| http.post("/", "small") }
      assert_equal "StringIO", response.body
    end
    with_server(ECHO, spool_threshold: 100_000) do |_, port|
      # A chunked upload larger than the threshold arrives intact too.
      socket = connect(port)
      socket.write("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
      data.bytes.each_slice(200_000) { |slice| socket.write("#{slice.size.to_s(16)}\r\n#{slice.pack('C*')}\r\n") }
      socket.write("0\r\n\r\n")
      assert_equal "#{data.bytesize} #{Digest::SHA256.hexdigest(data)}", read_response(socket).body.split[0, 2].join(" ")
    end
  end

  # A spool file that cannot be written (a full disk: ENOSPC; here the file size limit, EFBIG
  # after a short write) is the server's failure, not the client's: a 500, the connection closed,
  # the app not called, the error logged; before, the connection was closed without an answer.
  def test_a_body_that_cannot_be_spooled_gets_500
    skip "needs RLIMIT_FSIZE" unless Process.const_defined?(:RLIMIT_FSIZE)
    called = false
    app = ->(_env) { [200, {}, [(called = true).to_s]] }
    limit = Process.getrlimit(:FSIZE)
    xfsz = Signal.trap("XFSZ", "IGNORE") # or past the limit the kernel ends the process
    log = capture_log do
      with_server(app, lint: false, spool_threshold: 10_000) do |_, port|
        Process.setrlimit(:FSIZE, 50_000, limit[1])
        response, socket = raw_request(port, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 200000\r\n\r\n#{'x' * 200_000}")
        assert_equal 500, response.status
        assert closed_by_server?(socket)

        socket = connect(port)
        socket.write("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
        socket.write("4000\r\n#{'y' * 0x4000}\r\n" * 5)
        socket.write("0\r\n\r\n")
        response = read_response(socket)
        assert_equal 500, response.status
        refute_includes response.body, Dir.tmpdir, "the spool file's path was sent to the client"
        assert closed_by_server?(socket)
      ensure
        Process.setrlimit(:FSIZE, *limit)
      end
    end
    refute called, "the app was called with a body cut short"
    assert_match(/request body from .*SpoolFailed: could not write .*Errno::EFBIG/, log)
  ensure
    Signal.trap("XFSZ", xfsz) if xfsz
  end

  # The spool file is unlinked at once, but its blocks stay taken while it is open: a body cut
  # short (the client gone, here) closes it then, not whenever the GC gets to it.
  def test_a_body_cut_short_leaves_no_spool_file_open
    skip "needs /proc (Linux)" unless File.directory?("/proc/self/fd")
    GC.start # closes what earlier tests left to the Tempfile finalizer: only this test's count
    GC.disable # the Tempfile's finalizer would close it too
    earlier = spool_files
    with_server(ECHO, spool_threshold: 10_000) do |_, port|
      socket = connect(port)
      socket.write("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n#{'x' * 50_000}")
      deadline = Weft::Timers.now + 5
      sleep 0.02 until (spool_files - earlier).any? || Weft::Timers.now > deadline
      refute_empty spool_files - earlier, "the body was not spooled"
      socket.close
      sleep 0.02 until (spool_files - earlier).empty? || Weft::Timers.now > deadline
      assert_empty spool_files - earlier, "the spool file of a body cut short is still open"
    end
  ensure
    GC.enable
  end

  def test_expect_100_continue
    with_server(ECHO) do |_, port|
      socket = connect(port)
      socket.write("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n")
      assert socket.wait_readable(2), "no 100 Continue"
      assert_equal "HTTP/1.1 100 Continue\r\n\r\n", socket.readpartial(25)
      socket.write("12345")
      assert_equal 200, read_response(socket).status
    end
  end

  # A client that sends its whole body before reading (most do) must still read the 413: closed
  # at once, the server's socket would answer the body's next bytes with a reset, and the client
  # would see "connection reset" on its write or its read instead of the answer. The server
  # reads and drops the rest (up to Connection::LINGER_BYTES) first.
  def test_a_client_still_sending_its_body_reads_the_413
    with_server(ECHO, max_body_bytes: 1000) do |_, port|
      socket = connect(port)
      socket.write("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 600000\r\n\r\n")
      sleep 0.2 # the server has answered and, before, closed
      piece = "x" * 60_000
      10.times { socket.write(piece) }
      response = read_response(socket)
      assert_equal 413, response.status
      assert closed_by_server?(socket)
    end
  end

  def test_body_over_the_limit_gets_413
    with_server(ECHO, max_body_bytes: 1000) do |_, port|
      response, socket = raw_request(port, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1001\r\n\r\n")
      assert_equal 413, response.status
      assert closed_by_server?(socket)

      socket = connect(port)
      socket.write("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
      socket.write("200\r\n#{'x' * 512}\r\n" * 3)
      assert_equal 413, read_response(socket).status
      assert closed_by_server?(socket)

      # Over the limit with 100-continue: refused without inviting the body.
      response, socket = raw_request(port, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\nExpect: 100-continue\r\n\r\n")
      assert_equal 413, response.status
      assert closed_by_server?(socket)
    end
  end

  # A chunk that would take the body past max_body_bytes is refused as soon as its size line
  # arrives (not after spooling up to the limit), and a size that overflows 63 bits is a 400.
  def test_huge_chunk_size_is_refused_at_its_size_line
    with_server(ECHO) do |server, port| # the default limit: 1 GiB
      assert_equal 1 << 30, server.config[:max_body_bytes]
      {
        "7fffffffffffffff" => 413, # fits in 63 bits, far over the limit
        "40000001" => 413,         # 1 GiB + 1
        "ffffffffffffffff" => 400, # overflows
        "1#{'0' * 16}" => 400
      }.each do |size, status|
        socket = connect(port)
        socket.write("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n#{size}\r\nabc")
        assert socket.wait_readable(5), "#{size}: answered at once, without waiting for the chunk's data"
        assert_equal status, read_response(socket).status, size
        assert closed_by_server?(socket), size
      end
    end
    with_server(ECHO, max_body_bytes: 1000) do |_, port|
      # The limit counts the whole body: 600 + 500 is refused at the second size line.
      socket = connect(port)
      socket.write("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n258\r\n#{'x' * 600}\r\n1f4\r\n")
      assert socket.wait_readable(5), "answered at the second size line"
      assert_equal 413, read_response(socket).status
      # Exactly the limit is accepted.
      socket = connect(port)
      socket.write("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n258\r\n#{'x' * 600}\r\n190\r\n#{'y' * 400}\r\n0\r\n\r\n")
      assert_equal "1000", read_response(socket).body.split.first
    end
  end

  # A refused client that keeps its connection open (the server lingers on it, reading what it
  # still sends: Connection#linger) holds a stop no longer than that linger
  # (Connection::LINGER_SECONDS), not until the stop's shutdown_timeout. #with_server closes the
  # sockets #connect opened before its stop, so this one is opened apart and left open through
  # the stop, which #with_server fails when it takes over 10 s (a linger without its own bound
  # held the stop for the whole shutdown_timeout, 30 s here).
  def test_a_stop_ends_while_a_refused_client_keeps_its_connection_open
    socket = nil
    with_server(ECHO, max_body_bytes: 1000, shutdown_timeout: 30) do |_, port|
      socket = TCPSocket.new("127.0.0.1", port)
      socket.write("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1001\r\n\r\n")
      assert_equal 413, read_response(socket).status
    end
    assert closed_by_server?(socket), "the lingering connection was not closed by the stop"
  ensure
    socket&.close
  end

  private

  # @return [Array<String>] this process's open spool files (unlinked: "(deleted)")
  def spool_files
    Dir.children("/proc/self/fd").filter_map { |fd| File.readlink("/proc/self/fd/#{fd}") rescue nil } # rubocop:disable Style/RescueModifier
       .grep(/weft-body.*\(deleted\)/)
  end
end
