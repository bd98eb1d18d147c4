# frozen_string_literal: true

# A TCP relay that puts a network round trip between a client and a server on loopback:
# every chunk of bytes, in either direction, is delivered DELAY seconds after it arrived, in
# order, and a new connection waits one round trip (2 x DELAY) before its first bytes reach
# the server, standing for the TCP handshake. Loopback has no latency, so without it a new
# TCP + TLS connection per call costs only CPU and keep-alive looks worth less than it is on a
# real network (seed 001's app called a remote HTTPS host).
#
#   ruby bench/seeds/latency_relay.rb LISTEN_PORT TARGET_PORT DELAY_SECONDS
#
# Runs on Weft's reactor: a fiber per direction reads, another writes when each chunk is due.
$LOAD_PATH.unshift File.expand_path("../../lib", __dir__)
require "weft"
require "socket"

listen_port = Integer(ARGV.fetch(0))
target_port = Integer(ARGV.fetch(1))
delay = Float(ARGV.fetch(2))
Signal.trap(:TERM) { exit!(0) }

# Copies `from` to `to`, each chunk `delay` seconds after it was read; closes the write side
# once `from` ends, so the peer sees the end of the stream as it would over a network.
def pump(from, to, delay)
  due = Thread::Queue.new
  writer = Weft.spawn do
    while (item = due.pop)
      at, chunk = item
      wait = at - Weft::Timers.now
      sleep(wait) if wait.positive?
      to.write(chunk)
    end
    to.close_write
  rescue IOError, SystemCallError
    nil
  end
  loop do
    chunk = from.readpartial(65_536)
    due << [Weft::Timers.now + delay, chunk] # timed from its arrival, not from the wait's start
  end
rescue EOFError, IOError, SystemCallError
  due << nil
  writer.wait
end

Weft.run do
  server = TCPServer.new("127.0.0.1", listen_port)
  server.listen(1024)
  loop do
    client = server.accept
    Weft.spawn do
      sleep(2 * delay) # the round trip of the TCP handshake
      upstream = TCPSocket.new("127.0.0.1", target_port)
      [client, upstream].each { |socket| socket.setsockopt(Socket::IPPROTO_TCP, Socket::TCP_NODELAY, 1) }
      there = Weft.spawn { pump(client, upstream, delay) }
      pump(upstream, client, delay)
      there.wait
    ensure
      client.close
      upstream&.close
    end
  end
end
