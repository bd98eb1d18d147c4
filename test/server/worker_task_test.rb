# frozen_string_literal: true

require_relative "../test_helper"
require_relative "support/server_helpers"
require_relative "support/process_helpers"
require "tmpdir"

# The `worker_task` hook: a task in each serving process's reactor, alongside the server.
class ServerWorkerTaskTest < Minitest::Test
  include Weft::Test::ServerHelpers
  include Weft::Test::ProcessHelpers

  # The hook runs inside the server's reactor (so it can run a second Weft::Server on a socket
  # of its own), and is cancelled only once the requests in flight at stop time have finished.
  def test_runs_in_the_reactor_and_is_cancelled_after_requests_drain
    Dir.mktmpdir do |dir|
      path = File.join(dir, "side.sock")
      events = Queue.new
      side_app = ->(_env) { [200, {}, ["side"]] }
      slow_app = lambda do |_env|
        sleep 0.5
        events << :request_done
        [200, {}, ["slow"]]
      end
      hook = lambda do |server|
        events << [:running, Weft.running?, server.class]
        side = Weft::Server.new(side_app, binds: ["unix://#{path}"], shutdown_timeout: 5)
        Weft.spawn(detached: true) { side.run }
        begin
          sleep
        ensure
          events << :hook_cancelled
          side.stop
        end
      end
      with_server(slow_app, worker_task: [hook]) do |server, port|
        assert_equal [:running, true, Weft::Server], events.pop
        unix = eventually(5, "side socket") { File.socket?(path) && UNIXSocket.new(path) }
        unix.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert_equal "side", read_response(unix).body
        unix.close
        slow = Thread.new { http_get(port).body }
        sleep 0.1 # the request is in flight
        server.stop
        assert_equal "slow", slow.value
      end
      assert_equal %i[request_done hook_cancelled], [events.pop, events.pop]
      refute File.socket?(path) && socket_answers?(path), "the side server still answers after the stop"
    end
  end

  def test_a_failing_hook_is_logged_and_the_server_keeps_serving
    log = capture_log do
      with_server(->(_env) { [200, {}, ["ok"]] }, worker_task: [->(_server) { raise "hook broke" }]) do |_, port|
        assert_equal "ok", http_get(port).body
      end
    end
    assert_match(/worker_task: RuntimeError: hook broke/, log)
  end

  # In a cluster every worker runs the hook with its own index: here, each serves a unix socket
  # of its own, which is what an app needs to reach one particular worker.
  def test_each_cluster_worker_gets_its_own_socket
    Dir.mktmpdir do |dir|
      port = free_tcp_port
      File.write(File.join(dir, "weft.rb"), <<~RUBY)
        bind "tcp://127.0.0.1:#{port}"
        workers 2
        worker_task do |server|
          side = Weft::Server.new(->(_env) { [200, {}, ["\#{server.worker_index} \#{Process.pid}"]] },
                                  binds: ["unix://#{dir}/worker-\#{server.worker_index}.sock"])
          Weft.spawn(detached: true) { side.run }
          begin
            sleep
          ensure
            side.stop
          end
        end
      RUBY
      with_weft(File.join(FIXTURES, "pid.ru"), "--config", File.join(dir, "weft.rb"), port: port) do
        answers = [0, 1].map do |index|
          path = File.join(dir, "worker-#{index}.sock")
          eventually(10, "worker #{index}'s socket") { File.socket?(path) && socket_answers?(path) }
        end
        assert_equal %w[0 1], answers.map { |body| body.split.first }
        assert_equal 2, answers.map { |body| body.split.last }.uniq.size, "both sockets answered from one process"
      end
    end
  end

  private

  # @return [String, false] the body of GET / over the unix socket, false when nothing answers
  def socket_answers?(path)
    socket = UNIXSocket.new(path)
    socket.write("GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    read_response(socket).body
  rescue SystemCallError, EOFError
    false
  ensure
    socket&.close
  end
end
