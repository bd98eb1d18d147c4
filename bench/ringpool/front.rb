# frozen_string_literal: true

require "fileutils"
require "socket"
require_relative "../support/ports"

module RingpoolBench
  # FRONT=haproxy for the fault runs: HAProxy from Debian in front of the shards, each on an
  # address of its own (Weft's: RINGPOOL_SHARD_PORT, config/weft.rb; Puma's and Falcon's: a
  # single-process server per shard, Server::PROCESS_PER_SHARD), as the seed's team ran
  # a proxy per host in front of theirs. JMeter talks to the front; the front sends each request
  # to a shard, gives up on a shard after FRONT_TIMEOUT_MS and sends the request to another
  # (retry-on response-timeout, option redispatch), and takes a shard out of rotation after two
  # failed health checks FRONT_CHECK_MS apart (each may take FRONT_TIMEOUT_MS), back after two
  # passed. A request it retried may still be carried out by a stalled shard once it resumes:
  # numbers locked out with no caller, never a double allocation.
  class Front
    # The shards' health is judged by checks of GET /health (cheap: no peer calls, no
    # PostgreSQL). Judging it by the requests they fail (`observe layer7`) also took a shard out
    # as it stalled, but with a server timeout near the deadline it took the healthy one out too
    # (its requests that waited the deadline for the stalled peer timed out): 194-434 errors in
    # two of four runs. Checks misjudge a healthy shard as well when the machine keeps its
    # reactor waiting for a CPU longer than the timeout (one run of five at load 4-6, and once
    # at JMeter's start, before a run's measured window).
    # Not `option http-buffer-request`: with the body buffered HAProxy also retries the requests
    # a shard held when it stopped (no 504s), but a retried request does not count against the
    # shard (p99 113 ms). All runs: bench/results/ringpool-notes.md, 2026-12-06.

    attr_reader :port, :shard_port

    # @param shard_port [Integer] shard i serves the public API on shard_port + i
    # @param shards [Integer]
    # @param dir [String] where its configuration and log go
    def initialize(shard_port:, shards:, dir:, timeout_ms: Integer(ENV.fetch("FRONT_TIMEOUT_MS", "60")),
                   check_ms: Integer(ENV.fetch("FRONT_CHECK_MS", "50")))
      @shard_port = shard_port
      @shards = shards
      @dir = dir
      @timeout_ms = timeout_ms
      @check_ms = check_ms
    end

    # Starts HAProxy and waits until its port accepts connections.
    # @return [self]
    def start
      @port = Bench.free_port
      FileUtils.mkdir_p(@dir)
      path = File.join(@dir, "haproxy.cfg")
      File.write(path, configuration)
      log = File.join(@dir, "haproxy.log")
      @pid = Process.spawn("haproxy", "-db", "-f", path, out: log, err: log)
      deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 10
      begin
        TCPSocket.new("127.0.0.1", @port).close
      rescue SystemCallError
        raise "haproxy did not start; #{log}:\n#{File.read(log)}" if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline

        sleep 0.05
        retry
      end
      self
    end

    def stop
      return unless @pid

      Process.kill(:TERM, @pid)
      Process.wait(@pid)
    rescue Errno::ESRCH, Errno::ECHILD
      nil
    ensure
      @pid = nil
    end

    # @return [String] for the report
    def description
      "HAProxy #{`haproxy -v`[/version (\S+)/, 1]} in front (server timeout #{@timeout_ms} ms, one retry on another " \
        "shard, a shard out after 2 failed health checks #{@check_ms} ms apart, back after 2 passed)"
    end

    private

    def configuration
      servers = Array.new(@shards) do |index|
        "  server shard#{index} 127.0.0.1:#{@shard_port + index} check inter #{@check_ms}ms fall 2 rise 2"
      end
      <<~CFG
        global
          maxconn 4000
        defaults
          mode http
          timeout connect #{@timeout_ms}ms
          timeout client 30s
          timeout server #{@timeout_ms}ms
          timeout check #{@timeout_ms}ms
          retries 1
          option redispatch 1
          retry-on conn-failure empty-response response-timeout
          http-reuse always
        frontend public
          bind 127.0.0.1:#{@port}
          default_backend shards
        backend shards
          balance roundrobin
          option httpchk GET /health
        #{servers.join("\n")}
      CFG
    end
  end
end
