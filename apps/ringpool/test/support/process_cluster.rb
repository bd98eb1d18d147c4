# frozen_string_literal: true

require "json"
require "rbconfig"
require "socket"
require "tmpdir"
require "fileutils"

module Ringpool
  module Test
    # A real ringpool cluster: `weft serve -C apps/ringpool/config/weft.rb` with N workers (one
    # shard each), its own public port, socket folder and log file; or the same app under Puma or
    # Falcon (server:), through config/puma.rb and config/any_server.ru.
    class ProcessCluster
      ROOT = File.expand_path("../../../..", __dir__)
      APP = File.expand_path("../..", __dir__)

      # @return [Integer]
      attr_reader :port
      # @return [Integer]
      attr_reader :shards
      # @return [String]
      attr_reader :log

      # The deadline is generous by default: on a loaded test machine a tight one turns tracked
      # answers into overflow numbers, which is right for the service but not what most tests check.
      # @param env [Hash] more settings (RINGPOOL_BREAKER_OPEN_FOR, ...)
      # @param peer_port [Integer, nil] shards talk to each other over TCP on 127.0.0.1, shard N
      #   on peer_port + N, instead of unix sockets
      # @param server [Symbol] :weft, :puma or :falcon
      def initialize(database_url:, shards:, deadline_ms: 2_000, interval: 0.2, env: {}, peer_port: nil, server: :weft)
        @server = server
        @database_url = database_url
        @shards = shards
        @dir = Dir.mktmpdir("ringpool-cluster")
        @port = Weft::Test.free_tcp_port
        @log = File.join(@dir, "weft.log")
        @env = {
          "DATABASE_URL" => database_url, "RINGPOOL_SOCKET_DIR" => File.join(@dir, "sockets"),
          "RINGPOOL_BIND" => "tcp://127.0.0.1:#{@port}", "RINGPOOL_SHARDS" => shards.to_s,
          "RINGPOOL_DEADLINE_MS" => deadline_ms.to_s, "RINGPOOL_OWNERSHIP_INTERVAL" => interval.to_s,
          "RINGPOOL_DB_POOL" => "4"
        }.merge(env)
        @peer_port = peer_port
        @env["RINGPOOL_PEER_ADDRESS"] = "127.0.0.1:#{peer_port}" if peer_port
      end

      # Starts the master and waits until every shard answers on its own socket.
      # @return [self]
      def start(timeout: 30)
        @pid = Process.spawn(@env, RbConfig.ruby, *command, chdir: ROOT, out: @log, err: @log, pgroup: true)
        deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + timeout
        until Array.new(@shards) { |index| shard_health(index) }.all?
          raise "ringpool cluster exited early:\n#{log_tail}" if Process.waitpid(@pid, Process::WNOHANG)
          raise "ringpool cluster not up within #{timeout} s:\n#{log_tail}" if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
          sleep 0.05
        end
        self
      end

      # @return [Array<String>] the server's command line, after the Ruby
      def command
        case @server
        when :weft then [File.join(ROOT, "exe/weft"), "serve", "-C", File.join(APP, "config/weft.rb")]
        when :puma then [Gem.bin_path("puma", "puma"), "-C", File.join(APP, "config/puma.rb")]
        when :falcon
          [Gem.bin_path("falcon", "falcon"), "serve", "-b", "http://127.0.0.1:#{@port}", "-n", @shards.to_s,
           "-c", File.join(APP, "config/any_server.ru")]
        else raise ArgumentError, "unknown server #{@server.inspect}"
        end
      end

      # @return [String] shard `index`'s URL
      def shard_url(index)
        return "http://127.0.0.1:#{@peer_port + index}" if @peer_port
        "unix://#{File.join(@env['RINGPOOL_SOCKET_DIR'], "shard-#{index}.sock")}"
      end

      # GET /health on shard `index`'s own socket. @return [Hash, nil] nil when it does not answer
      def shard_health(index, timeout: 2)
        socket = @peer_port ? TCPSocket.new("127.0.0.1", @peer_port + index) : UNIXSocket.new(URI.parse(shard_url(index)).path)
        socket.write("GET /health HTTP/1.1\r\nHost: shard\r\nConnection: close\r\n\r\n")
        return nil unless socket.wait_readable(timeout)
        response = socket.read
        JSON.parse(response.split("\r\n\r\n", 2).last) if response.start_with?("HTTP/1.1 200")
      rescue SystemCallError, IOError, JSON::ParserError
        nil
      ensure
        socket&.close
      end

      # @return [Integer] the worker pid serving shard `url`
      def pid_of(url)
        index = @peer_port ? Integer(url[/:(\d+)\z/, 1]) - @peer_port : Integer(url[/shard-(\d+)\.sock\z/, 1])
        shard_health(index).fetch("pid")
      end

      # TERM, then KILL the whole group if it lingers; removes the folder.
      def stop
        return unless @pid
        Process.kill("TERM", @pid)
        deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 15
        until Process.waitpid(@pid, Process::WNOHANG)
          if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
            Process.kill("KILL", -@pid)
            Process.waitpid(@pid)
            break
          end
          sleep 0.05
        end
      rescue Errno::ESRCH, Errno::ECHILD
        nil
      ensure
        @pid = nil
        FileUtils.rm_rf(@dir)
      end

      # @return [String] the end of the cluster's log, for failure messages
      def log_tail(lines = 40)
        File.exist?(@log) ? File.readlines(@log).last(lines).join : ""
      end
    end
  end
end
