# frozen_string_literal: true

# Opens COUNT connections to 127.0.0.1:PORT in a burst — all connects issued at once, not one
# after the other — behaving as KIND, prints "ready OPEN failed FAILED" and holds them until
# stdin closes (then closes them all).
#
#   keepalive  one GET on each, its response read: a used, idle keep-alive connection
#   slowloris  the first line and a header of a request, never finished
#   silent     connected, nothing sent
#
#   ruby bench/server/burst_client.rb PORT COUNT KIND
require "socket"

port = Integer(ARGV.fetch(0))
count = Integer(ARGV.fetch(1))
kind = ARGV.fetch(2)
abort "KIND: keepalive, slowloris or silent" unless %w[keepalive slowloris silent].include?(kind)
Process.setrlimit(:NOFILE, Process.getrlimit(:NOFILE)[1])
deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + Integer(ENV.fetch("BURST_CLIENT_SECONDS", "60"))
address = Socket.sockaddr_in(port, "127.0.0.1")
payload = {
  "keepalive" => "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
  "slowloris" => "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ",
  "silent" => nil
}.fetch(kind)

# Every connect is issued before any is waited for; the kernel completes them in parallel.
pending = []
failed = 0
count.times do
  socket = Socket.new(:INET, :STREAM)
  case socket.connect_nonblock(address, exception: false)
  when :wait_writable, 0 then pending << socket
  end
rescue SystemCallError
  socket&.close
  failed += 1
end

open = []
until pending.empty? || Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
  _, writable, = IO.select(nil, pending, nil, 1)
  (writable || []).each do |socket|
    pending.delete(socket)
    begin
      socket.connect_nonblock(address, exception: false)
      socket.write(payload) if payload
      open << socket
    rescue Errno::EISCONN
      socket.write(payload) if payload
      open << socket
    rescue SystemCallError
      socket.close
      failed += 1
    end
  end
end
failed += pending.size

if kind == "keepalive"
  # Read every response; a connection whose response does not come is counted as failed.
  waiting = open.to_h { |socket| [socket, +""] }
  until waiting.empty? || Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
    readable, = IO.select(waiting.keys, nil, nil, 1)
    (readable || []).each do |socket|
      data = socket.read_nonblock(4096, exception: false)
      if data.nil?
        waiting.delete(socket)
        open.delete(socket)
        failed += 1
      elsif data.is_a?(String)
        waiting[socket] << data
        waiting.delete(socket) if waiting[socket].include?("Hello World")
      end
    rescue SystemCallError
      waiting.delete(socket)
      open.delete(socket)
      failed += 1
    end
  end
  failed += waiting.size
  waiting.each_key { |socket| open.delete(socket) }
end

$stdout.puts "ready #{open.size} failed #{failed}"
$stdout.flush
$stdin.read
open.each(&:close)
