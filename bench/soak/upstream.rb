# frozen_string_literal: true

# The soak test's upstream HTTP service, which misbehaves on a schedule (bench/soak/run starts it):
#
#   ruby bench/soak/upstream.rb PORT
#
# A cycle of CYCLE (60) seconds, by the second within it:
#   0-29    answers at once (keep-alive)
#   30-39   answers after 0.1-0.5 s
#   40-44   resets the connection (SO_LINGER 0) instead of answering, every other request
#   45-54   answers, then closes the keep-alive connection without saying so
#   55-59   refuses connections: the listening socket is closed, then bound again
# Any phase: /slow answers after 0.3 s, which the app calls past a shorter deadline.
# A plain threaded server, so that it shares nothing with the Weft under test.
require "socket"

PORT = Integer(ARGV.fetch(0))
CYCLE = 60
STARTED = Process.clock_gettime(Process::CLOCK_MONOTONIC)

def phase
  second = (Process.clock_gettime(Process::CLOCK_MONOTONIC) - STARTED) % CYCLE
  if second < 30 then :answer
  elsif second < 40 then :slow
  elsif second < 45 then :reset
  elsif second < 55 then :close
  else :refuse
  end
end

def respond(socket, body, close:)
  socket.write("HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: #{body.bytesize}\r\n\r\n#{body}")
  socket.close if close
end

def serve(socket)
  flip = false
  while (head = socket.gets("\r\n\r\n"))
    length = head[/^content-length:\s*(\d+)/i, 1].to_i
    socket.read(length) if length.positive?
    path = head[/\A\S+ (\S+)/, 1]
    sleep 0.3 if path == "/slow"
    case phase
    when :slow then sleep(0.1 + rand * 0.4)
    when :reset
      if (flip = !flip)
        socket.setsockopt(Socket::SOL_SOCKET, Socket::SO_LINGER, [1, 0].pack("ii"))
        return socket.close
      end
    when :close then return respond(socket, "upstream #{path}", close: true)
    end
    respond(socket, "upstream #{path}", close: false)
  end
rescue IOError, SystemCallError
  nil
ensure
  socket.close unless socket.closed?
end

$stdout.sync = true
loop do
  server = TCPServer.new("127.0.0.1", PORT)
  until phase == :refuse
    next unless server.wait_readable(0.2)

    Thread.new(server.accept) { |socket| serve(socket) }
  end
  server.close
  sleep 0.1 while phase == :refuse
end
