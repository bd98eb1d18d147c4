# frozen_string_literal: true

require "json"
require "rbconfig"

module Weft
  module Test
    # Runs `exe/weft` as a child process for cluster, signal and CLI tests.
    module ProcessHelpers
      ROOT = File.expand_path("../../..", __dir__)
      FIXTURES = File.expand_path("../fixtures", __dir__)

      # Starts `weft serve ARGS`, waits until `port` answers, yields the pid, and makes sure the
      # process is gone afterwards.
      def with_weft(*args, port:, log: File::NULL, env: {})
        pid = Process.spawn(env, RbConfig.ruby, File.join(ROOT, "exe/weft"), "serve", *args,
                            chdir: ROOT, out: log, err: log, pgroup: true)
        wait_for_port(port, pid)
        yield pid
      ensure
        stop_process(pid) if pid
      end

      def wait_for_port(port, pid, timeout: 20)
        deadline = Weft::Timers.now + timeout
        loop do
          TCPSocket.new("127.0.0.1", port).close
          return
        rescue SystemCallError
          raise "weft (pid #{pid}) exited early" if Process.waitpid(pid, Process::WNOHANG)
          raise "weft did not listen on #{port} within #{timeout}s" if Weft::Timers.now > deadline
          sleep 0.05
        end
      end

      # TERM, then KILL (the whole process group) if it lingers.
      def stop_process(pid, timeout: 15)
        Process.kill("TERM", pid)
        deadline = Weft::Timers.now + timeout
        until Process.waitpid(pid, Process::WNOHANG)
          if Weft::Timers.now > deadline
            Process.kill("KILL", -pid)
            Process.waitpid(pid)
            break
          end
          sleep 0.05
        end
      rescue Errno::ESRCH, Errno::ECHILD
        nil
      end

      # GET on a fresh connection. @return [String] the body
      def get_body(port, path = "/")
        Net::HTTP.start("127.0.0.1", port, open_timeout: 5, read_timeout: 10) { |http| http.get(path, "Connection" => "close").body }
      end

      # Waits until the block is true (polling), failing after `timeout` seconds.
      def eventually(timeout = 15, message = "condition not met")
        deadline = Weft::Timers.now + timeout
        until (value = yield)
          flunk("#{message} within #{timeout}s") if Weft::Timers.now > deadline
          sleep 0.05
        end
        value
      end

      # Pids of the answering workers seen over `tries` fresh connections.
      def worker_pids(port, tries: 60)
        Array.new(tries) { get_body(port).to_i }.uniq.sort
      end

      # Runs requests on fresh connections in a thread while the block runs.
      # @return [Hash] counts of :ok and failures by error class
      def under_load(port)
        counts = Hash.new(0)
        stop = false
        loader = Thread.new do
          deadline = Weft::Timers.now + 60
          until stop || Weft::Timers.now > deadline
            begin
              body = get_body(port)
              counts[body.to_s.match?(/\A\d+\z/) ? :ok : :bad_body] += 1
            rescue StandardError => e
              counts[e.class.name] += 1
            end
            sleep 0.002
          end
        end
        yield
        stop = true
        loader.join
        counts
      end
    end
  end
end
