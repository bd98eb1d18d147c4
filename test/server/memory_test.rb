# frozen_string_literal: true

require_relative "../test_helper"
require_relative "support/server_helpers"
require_relative "support/process_helpers"

# What a server process's memory does under large uploads (Linux: RSS from /proc).
class ServerMemoryTest < Minitest::Test
  include Weft::Test::ServerHelpers
  include Weft::Test::ProcessHelpers

  MB = 1024 * 1024

  # Body bytes pass through reused buffers, not a fresh string per read: before, a 100 MB
  # upload grew the server by ~40 MB of garbage strings (200 MB: +82 MB); now by about 1 MB.
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

  private

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
