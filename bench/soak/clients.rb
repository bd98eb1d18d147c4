# frozen_string_literal: true

# The soak test's misbehaving and heavy clients (valid load comes from wrk), for SECONDS,
# against 127.0.0.1:PORT; prints a JSON summary of what they saw at the end.
#
#   ruby bench/soak/clients.rb PORT SECONDS
#
#   slowloris   SLOW connections each sending a header line every 2 s, never finishing the
#               head; the server answers 408 at header_timeout and the client reconnects
#   slow body   SLOW_BODY uploads of 30 bytes at a byte a second
#   malformed   a new connection every 20 ms with a malformed request (or a half request
#               then a reset), its response read
#   uploads     a 1 MB upload every 0.5 s, Content-Length and chunked in turn
require "json"
require "socket"

PORT = Integer(ARGV.fetch(0))
SECONDS = Float(ARGV.fetch(1))
SLOW = Integer(ENV.fetch("SOAK_SLOW", "200"))
SLOW_BODY = Integer(ENV.fetch("SOAK_SLOW_BODY", "20"))

MALFORMED = [
  "GET / HTTP/1.1\r\nHost: x\r\nBad Header: y\r\n\r\n",
  "GET /\x01 HTTP/1.1\r\nHost: x\r\n\r\n",
  "GET / HTTP/9.9\r\nHost: x\r\n\r\n",
  "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
  "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n7fffffffffffffff\r\nabc",
  "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nfffffffffffffffff\r\n",
  "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999\r\n\r\n",
  "GET /#{'a' * 9000} HTTP/1.1\r\nHost: x\r\n\r\n",
  "GET / HTTP/1.1\r\nHost: x\r\n#{"X-Pad: #{'p' * 1000}\r\n" * 70}\r\n",
  "GET / HTTP/1.1\r\n#{(1..120).map { |i| "X-#{i}: v\r\n" }.join}\r\n",
  "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",
  "GET / HTTP/1.1\r\nHost: x\r\n folded: y\r\n\r\n",
  :reset # half a request, then a TCP reset
].freeze

def now
  Process.clock_gettime(Process::CLOCK_MONOTONIC)
end

def open_socket
  Socket.tcp("127.0.0.1", PORT, connect_timeout: 5)
end

# @return [Integer, nil] the status of the response waiting on the socket, nil at EOF
def read_status(socket)
  data = socket.read_nonblock(4096, exception: false)
  return nil unless data.is_a?(String)
  data[/\AHTTP\/1\.1 (\d{3})/, 1]&.to_i || 0
rescue SystemCallError, IOError
  nil
end

counts = Hash.new(0)
deadline = now + SECONDS
Process.setrlimit(:NOFILE, Process.getrlimit(:NOFILE)[1])

uploads = Thread.new do
  block = "u" * 65_536
  turn = 0
  while now < deadline
    begin
      socket = open_socket
      if turn.even?
        socket.write("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: #{16 * block.bytesize}\r\n\r\n")
        16.times { socket.write(block) }
      else
        socket.write("POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
        16.times { socket.write("10000\r\n", block, "\r\n") }
        socket.write("0\r\n\r\n")
      end
      socket.wait_readable(10)
      status = read_status(socket)
      counts["upload #{status || 'closed'}"] += 1
    rescue SystemCallError, IOError => e
      counts["upload #{e.class}"] += 1
    ensure
      socket&.close
    end
    turn += 1
    sleep 0.5
  end
end

slow = [] # [socket, next write time, kind]
malformed = [] # [socket, opened at]
next_malformed = now
until now >= deadline
  # Keep the slow connections topped up.
  while slow.count { |_, _, kind| kind == :head } < SLOW
    socket = open_socket
    socket.write("GET / HTTP/1.1\r\nHost: x\r\n")
    slow << [socket, now + 2, :head]
  end
  while slow.count { |_, _, kind| kind == :body } < SLOW_BODY
    socket = open_socket
    socket.write("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 30\r\n\r\n")
    slow << [socket, now + 1, :body]
  end
  if now >= next_malformed
    payload = MALFORMED.sample
    socket = open_socket
    if payload == :reset
      socket.write("GET / HTTP/1.1\r\nHo")
      socket.setsockopt(Socket::SOL_SOCKET, Socket::SO_LINGER, [1, 0].pack("ii"))
      socket.close
      counts["malformed reset"] += 1
    else
      begin
        socket.write(payload)
      rescue SystemCallError
        nil # refused before all of it was taken (oversize)
      end
      malformed << [socket, now]
    end
    next_malformed = now + 0.02
  end

  readable, = IO.select(slow.map(&:first) + malformed.map(&:first), nil, nil, 0.05)
  (readable || []).each do |socket|
    if (entry = slow.find { |s, _, _| s.equal?(socket) })
      status = read_status(socket)
      counts["slow #{entry[2]} #{status || 'closed'}"] += 1
      slow.delete(entry)
      socket.close
    elsif (entry = malformed.find { |s, _| s.equal?(socket) })
      status = read_status(socket)
      counts["malformed #{status || 'closed'}"] += 1
      malformed.delete(entry)
      socket.close
    end
  end
  malformed.reject! do |socket, opened|
    next false if now - opened < 5
    counts["malformed unanswered"] += 1
    socket.close
    true
  end
  slow.reject! do |entry|
    socket, due, kind = entry
    next false if now < due
    socket.write(kind == :head ? "X-Slow: y\r\n" : "b")
    entry[1] = now + (kind == :head ? 2 : 1)
    false
  rescue SystemCallError, IOError
    counts["slow #{kind} write failed"] += 1
    socket.close
    true
  end
end
uploads.join
slow.each { |socket, _, _| socket.close }
malformed.each { |socket, _| socket.close }
puts JSON.generate(counts.sort.to_h)
