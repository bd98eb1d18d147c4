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
end
