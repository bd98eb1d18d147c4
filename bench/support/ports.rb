# frozen_string_literal: true

require "socket"

module Bench
  # A TCP port on 127.0.0.1 that was free a moment ago (the kernel's pick): start the server on
  # it at once.
  # @return [Integer]
  def self.free_port
    server = TCPServer.new("127.0.0.1", 0)
    server.addr[1]
  ensure
    server&.close
  end

  # The first of `count` consecutive TCP ports on 127.0.0.1 that were free a moment ago, for
  # servers that take port + N each. Below Linux's ephemeral ports, which an outgoing
  # connection could take meanwhile.
  # @param count [Integer]
  # @return [Integer]
  def self.free_ports(count)
    100.times do
      base = rand(20_000..32_000)
      sockets = []
      begin
        count.times { |offset| sockets << TCPServer.new("127.0.0.1", base + offset) }
        return base
      rescue Errno::EADDRINUSE
        next
      ensure
        sockets.each(&:close)
      end
    end
    raise "no #{count} consecutive free ports found"
  end
end
