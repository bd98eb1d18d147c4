# frozen_string_literal: true

require "rbconfig"
require "socket"
require "tempfile"

module Weft
  module Test
    # Runs Weft's server as a real process for tests that need one (an app with its own
    # database, a framework under `weft serve`).
    #
    #   include Weft::Test::WeftServe
    #   serve_rackup("test/apps/app.ru", env: { "DATABASE_URL" => url }) { |port, log| ... }
    module WeftServe
      ROOT = File.expand_path("../..", __dir__)

      # Starts `weft serve -w 0` on `rackup`, waits until it listens, yields, then stops it (TERM).
      # @param env [Hash] the server's environment
      # @param args [Array<String>] more `weft serve` arguments
      # @param wait [Numeric] seconds it may take to listen
      # @yieldparam port [Integer]
      # @yieldparam log [String] the path of its output (stdout and stderr)
      def serve_rackup(rackup, env: {}, args: [], wait: 30)
        port = free_tcp_port
        log = Tempfile.new("weft-serve")
        command = [RbConfig.ruby, File.join(ROOT, "exe/weft"), "serve", rackup, "-b", "tcp://127.0.0.1:#{port}", "-w", "0", *args]
        pid = Process.spawn(env, *command, out: log.path, err: log.path, chdir: ROOT)
        wait_until_listening(port, pid, log.path, wait)
        yield port, log.path
      ensure
        if pid
          Process.kill("TERM", pid) rescue nil # rubocop:disable Style/RescueModifier
          Process.wait(pid) rescue nil # rubocop:disable Style/RescueModifier
        end
        log&.close!
      end

      private

      def wait_until_listening(port, pid, log, wait)
        deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + wait
        loop do
          TCPSocket.new("127.0.0.1", port).close
          return
        rescue SystemCallError
          flunk "weft serve exited early:\n#{File.read(log)}" if Process.waitpid(pid, Process::WNOHANG)
          flunk "weft serve did not listen within #{wait}s:\n#{File.read(log)}" if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
          sleep 0.05
        end
      end
    end
  end
end
