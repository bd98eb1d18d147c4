# frozen_string_literal: true

# Opens COUNT keep-alive connections to 127.0.0.1:PORT, makes one request on each (so each is
# a used, idle keep-alive connection), prints "ready N" and holds them until stdin closes.
# Gives up opening more after IDLE_CLIENT_SECONDS (60).
#   ruby bench/server/idle_client.rb PORT COUNT
require "socket"

port = Integer(ARGV.fetch(0))
count = Integer(ARGV.fetch(1))
Process.setrlimit(:NOFILE, Process.getrlimit(:NOFILE)[1])
request = "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
sockets = []
failed = 0
deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + Integer(ENV.fetch("IDLE_CLIENT_SECONDS", "60"))
count.times do
  break if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
  begin
    socket = Socket.tcp("127.0.0.1", port, connect_timeout: 5)
    socket.write(request)
    response = +""
    until response.include?("Hello World")
      raise "no response" unless socket.wait_readable(10)
      response << socket.readpartial(4096)
    end
    sockets << socket
  rescue StandardError
    failed += 1
  end
end
$stdout.puts "ready #{sockets.size} failed #{failed}"
$stdout.flush
$stdin.read
sockets.each(&:close)
