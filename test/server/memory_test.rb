# frozen_string_literal: true

require_relative "../test_helper"
require_relative "support/server_helpers"
require_relative "support/process_helpers"

# What the server's memory does under large uploads and bursts of connections (RSS from /proc
# on Linux), and the fiber policy behind the connection figures.
class ServerMemoryTest < Minitest::Test
  include Weft::Test::ServerHelpers
  include Weft::Test::ProcessHelpers

  MB = 1024 * 1024

  # Body bytes pass through reused buffers, not a fresh string per read: before, a 100 MB
  # upload grew the server by ~40 MB of garbage strings (200 MB: +82 MB); now by about 1 MB.
  # On Ruby 3.3 the spool file's IO#write left each piece's buffer shared, so the next read into
  # it copied it: +48-52 MB here, until the spool wrote with #syswrite (RequestBody::Sink).
  def test_100_mb_uploads_grow_the_server_by_less_than_30_mb
    skip "needs /proc (Linux)" unless File.readable?("/proc/self/status")
    port = free_tcp_port
    with_weft(File.join(FIXTURES, "upload.ru"), "-w", "0", "-q", "-b", "tcp://127.0.0.1:#{port}", port: port) do |pid|
      assert_equal (1 * MB).to_s, upload(port, 1 * MB, chunked: false) # warm-up
      assert_equal (1 * MB).to_s, upload(port, 1 * MB, chunked: true)
      before = rss_mb(pid)
      assert_equal (100 * MB).to_s, upload(port, 100 * MB, chunked: false)
      assert_equal (100 * MB).to_s, upload(port, 100 * MB, chunked: true)
      growth = rss_mb(pid) - before
      assert_operator growth, :<, 30, "RSS grew by #{growth.round(1)} MB over two 100 MB uploads"
    end
  end

  # Whatever the first large uploads leave in the process, more of them do not add to it: a
  # string kept (or left for the GC) per read, as before the buffers were reused, would add
  # ~40 MB per upload, 160 MB here. The bound, half of that, leaves room for the RSS's swings
  # between uploads as the GC grows and trims its heap: ±15 MB on Ruby 3.3 as a rule, and a
  # growth of 41 MB seen once in CI (a bound of 40 failed there).
  def test_more_large_uploads_do_not_grow_the_server
    skip "needs /proc (Linux)" unless File.readable?("/proc/self/status")
    port = free_tcp_port
    with_weft(File.join(FIXTURES, "upload.ru"), "-w", "0", "-q", "-b", "tcp://127.0.0.1:#{port}", port: port) do |pid|
      assert_equal (100 * MB).to_s, upload(port, 100 * MB, chunked: false) # the first one settles the heap
      assert_equal (100 * MB).to_s, upload(port, 100 * MB, chunked: true)
      before = rss_mb(pid)
      4.times { |i| assert_equal (100 * MB).to_s, upload(port, 100 * MB, chunked: i.odd?) }
      growth = rss_mb(pid) - before
      assert_operator growth, :<, 80, "RSS grew by #{growth.round(1)} MB over four more 100 MB uploads"
    end
  end

  # Fibers are what a connection costs most (~16 KB of stack each, which Ruby keeps for reuse
  # once a fiber ends, so the peak stays in the RSS): a connection is given none while it has
  # not shown it reuses connections. Linger is 5 s here, so a connection that lingers is seen.
  def test_only_a_connection_that_carried_two_requests_lingers_in_a_fiber
    with_server(->(_) { [200, {}, ["ok"]] }, linger: 5) do |server, port|
      silent = connect(port)
      eventually(2, "a silent new connection parked") { server.idle_pool.size == 1 }
      once = connect(port)
      once.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
      assert_equal 200, read_response(once).status
      eventually(2, "a connection after one request parked") { server.idle_pool.size == 2 }
      once.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
      assert_equal 200, read_response(once).status
      sleep 0.3
      assert_equal 1, server.idle_pool.size, "after its second request, a connection lingers"
      once.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
      assert_equal 200, read_response(once).status, "answered from the lingering fiber"
      [silent, once].each(&:close) # the lingering fiber sees the end of stream at once
    end
  end

  # A client that sends a head slowly holds no fiber between its bytes, and still gets its
  # answer (or a 408 at header_timeout, see timeouts_test.rb).
  def test_an_incomplete_head_waits_parked_without_a_fiber
    with_server(->(_) { [200, {}, ["ok"]] }, header_timeout: 5) do |server, port|
      socket = connect(port)
      socket.write("GET / HTTP/1.1\r\nHo")
      eventually(2, "the connection parked mid-head") { server.idle_pool.size == 1 }
      socket.write("st: x\r\n")
      sleep 0.1
      assert_equal 1, server.idle_pool.size, "parked again after more of the head"
      socket.write("\r\n")
      assert_equal "ok", read_response(socket).body
    end
  end

  # 1,500 slowloris connections and 1,500 one-request keep-alive connections, each batch opened
  # at once: each used to hold a fiber (slowloris for all of header_timeout, the others for
  # linger), ~22 KB per connection that stayed in the RSS (~65 MB here); now ~4 KB.
  def test_bursts_of_slow_and_one_request_connections_cost_under_8_kb_each
    skip "needs /proc (Linux)" unless File.readable?("/proc/self/status")
    count = 1500
    limit = Process.getrlimit(:NOFILE)
    skip "needs ulimit -n of at least #{2 * count + 100} (hard limit #{limit[1]})" if limit[1] < 2 * count + 100
    Process.setrlimit(:NOFILE, limit[1]) # inherited by the server process
    port = free_tcp_port
    with_weft(File.join(FIXTURES, "pid.ru"), "-w", "0", "-q", "--max-connections", "10000", "-b", "tcp://127.0.0.1:#{port}", port: port) do |pid|
      3.times { get_body(port) }
      before = rss_mb(pid)
      slow = burst(port, count, "GET / HTTP/1.1\r\nHost: x\r\nX-Slow: ")
      used = burst(port, count, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
      used.each { |socket| assert_equal 200, read_response(socket).status }
      sleep 0.5 # past linger
      growth_kb = (rss_mb(pid) - before) * 1024
      per_connection = growth_kb / (2 * count)
      assert_operator per_connection, :<, 8, "#{growth_kb.round} KB for #{2 * count} connections"
    ensure
      [*slow, *used].each(&:close)
    end
  ensure
    Process.setrlimit(:NOFILE, *limit) if limit
  end

  private

  # Opens `count` connections with every connect issued before any completes, then sends
  # `payload` on each. @return [Array<Socket>]
  def burst(port, count, payload)
    address = Socket.sockaddr_in(port, "127.0.0.1")
    sockets = Array.new(count) do
      socket = Socket.new(:INET, :STREAM)
      socket.connect_nonblock(address, exception: false)
      socket
    end
    pending = sockets.dup
    until pending.empty?
      _, writable, = IO.select(nil, pending, nil, 10)
      flunk "connections not established within 10 s" unless writable
      writable.each do |socket|
        socket.connect_nonblock(address, exception: false) # 0 or EISCONN: connected
        socket.write(payload)
        pending.delete(socket)
      end
    end
    sockets
  end

  # Sends a body of `size` bytes (Content-Length or 64 KiB chunks) and returns the response body.
  def upload(port, size, chunked:)
    socket = connect(port)
    block = "x" * 65_536
    if chunked
      socket.write("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
      (size / block.bytesize).times { socket.write("10000\r\n", block, "\r\n") }
      socket.write("0\r\n\r\n")
    else
      socket.write("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: #{size}\r\n\r\n")
      (size / block.bytesize).times { socket.write(block) }
    end
    read_response(socket).body
  ensure
    socket&.close
  end

  def rss_mb(pid)
    File.read("/proc/#{pid}/status")[/^VmRSS:\s+(\d+)/, 1].to_i / 1024.0
  end
end
