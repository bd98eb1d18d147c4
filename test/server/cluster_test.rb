# frozen_string_literal: true

require_relative "../test_helper"
require_relative "support/server_helpers"
require_relative "support/process_helpers"
require "tmpdir"

class ServerClusterTest < Minitest::Test
  include Weft::Test::ServerHelpers
  include Weft::Test::ProcessHelpers

  def watchdog_timeout
    90
  end

  def test_workers_share_the_load_are_replaced_and_scaled_by_signals
    port = free_tcp_port
    with_weft(File.join(FIXTURES, "pid.ru"), "-p", port.to_s, "-o", "127.0.0.1", "-w", "2", "--stats-path", "/stats", port: port) do |master|
      pids = eventually(15, "two workers answering") { (p = worker_pids(port)).size == 2 && p }
      refute_includes pids, master

      Process.kill("KILL", pids.first)
      replacement = eventually(15, "a replacement worker") { (worker_pids(port) - pids).first }
      assert replacement

      Process.kill("TTIN", master)
      eventually(15, "three workers after TTIN") { worker_pids(port, tries: 90).size == 3 }
      Process.kill("TTOU", master)
      eventually(15, "two workers after TTOU") do
        JSON.parse(get_body(port, "/stats"))["workers"].size == 2 && worker_pids(port).size == 2
      end
    end
  end

  def test_phased_and_hot_restart_refuse_no_connection
    port = free_tcp_port
    with_weft(File.join(FIXTURES, "pid.ru"), "-p", port.to_s, "-o", "127.0.0.1", "-w", "2", port: port) do |master|
      before = eventually(15, "two workers") { (p = worker_pids(port)).size == 2 && p }

      counts = under_load(port) do
        Process.kill("USR1", master)
        eventually(30, "all workers replaced by USR1") { (worker_pids(port) & before).empty? }
      end
      assert_equal ["ok"], counts.keys.map(&:to_s), "phased restart: #{counts.inspect}"
      assert_operator counts[:ok], :>, 20

      middle = worker_pids(port)
      counts = under_load(port) do
        Process.kill("USR2", master)
        eventually(40, "all workers replaced by USR2") { (worker_pids(port) & middle).empty? && worker_pids(port).size == 2 }
      end
      assert_equal ["ok"], counts.keys.map(&:to_s), "hot restart: #{counts.inspect}"
      assert Process.waitpid(master, Process::WNOHANG).nil?, "the master (same pid after exec) is still running"
    end
  end

  def test_sigterm_finishes_in_flight_requests_then_exits
    [0, 2].each do |workers|
      port = free_tcp_port
      with_weft(File.join(FIXTURES, "pid.ru"), "-p", port.to_s, "-o", "127.0.0.1", "-w", workers.to_s, port: port) do |master|
        client = Thread.new { get_body(port, "/sleep?s=1") }
        sleep 0.3 # the request is in flight
        Process.kill("TERM", master)
        assert_match(/\A\d+\z/, client.value, "workers=#{workers}: in-flight request was cut")
        eventually(10, "workers=#{workers}: exit after TERM") { Process.waitpid(master, Process::WNOHANG) }
        assert_raises(Errno::ECONNREFUSED) { TCPSocket.new("127.0.0.1", port) }
      end
    end
  end

  def test_reuse_port_spreads_connections_evenly_and_survives_a_hot_restart
    Dir.mktmpdir do |dir|
      port = free_tcp_port
      File.write(File.join(dir, "weft.rb"), "workers 2\nreuse_port true\n")
      with_weft(File.join(FIXTURES, "pid.ru"), "-C", File.join(dir, "weft.rb"), "-p", port.to_s, "-o", "127.0.0.1", port: port) do |master|
        eventually(15, "two workers") { worker_pids(port).size == 2 }
        # 60 connections open at once, each answered, then counted by worker.
        sockets = Array.new(60) { connect(port) }
        sockets.each { |socket| socket.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n") }
        counts = sockets.map { |socket| read_response(socket).body }.tally
        sockets.each(&:close)
        assert_equal 2, counts.size, counts.inspect
        counts.each_value { |count| assert_operator count, :>=, 15, "uneven spread: #{counts.inspect}" }

        before = worker_pids(port)
        Process.kill("USR2", master)
        eventually(40, "workers replaced by USR2") { (worker_pids(port) & before).empty? && worker_pids(port).size == 2 }
      end
    end
  end
end
