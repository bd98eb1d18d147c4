# frozen_string_literal: true

require "fileutils"
require "json"
require "rbconfig"
require "tmpdir"
require "weft/thread_statistics"
# Bench::Processes.children: the one reading of a process's children from /proc, which the
# benchmarks use too. That file requires nothing of the benchmarks; this one is a Minitest
# mixin (skip, assertions), which a benchmark could not load without Minitest.
require_relative "../../../bench/support/processes"

module Weft
  module Test
    # Runs `exe/weft` as a child process for cluster, signal and CLI tests.
    module ProcessHelpers
      ROOT = File.expand_path("../../..", __dir__)
      FIXTURES = File.expand_path("../fixtures", __dir__)

      # Starts `weft serve ARGS`, waits until `port` answers, yields the pid, and makes sure the
      # process is gone afterwards. `spawn` adds Process.spawn options (e.g. rlimit_nofile:).
      #
      # The server gets a temp dir of its own (TMPDIR), removed afterwards with what it left
      # there: a master's statistics directory (weft-<pid>) stays when the master ends without
      # its cleanup (a stop signal while a hot restart's new image boots, a KILL), and a later
      # master given the same pid would have found it (a full run of the suite left 9 in /tmp).
      def with_weft(*args, port:, log: File::NULL, env: {}, spawn: {})
        tmpdir = Dir.mktmpdir("weft-serve")
        pid = Process.spawn({ "TMPDIR" => tmpdir }.merge(env), RbConfig.ruby, File.join(ROOT, "exe/weft"), "serve", *args,
                            chdir: ROOT, out: log, err: log, pgroup: true, **spawn)
        wait_for_port(port, pid)
        yield pid
      ensure
        stop_process(pid) if pid
        FileUtils.rm_rf(tmpdir) if tmpdir
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

      # Pids of `parent`'s live child processes (a master's workers; during a hot restart the
      # previous master's too), from /proc: the processes there are, not the ones a sample of
      # requests happened to reach. A worker holding noticeably more keep-alive connections than
      # its sibling leaves new ones to it (AcceptSpread), so a sample of fresh connections can
      # miss a worker that serves. A child that exited and awaits its reaping is not counted.
      def child_pids(parent)
        skip "needs /proc (Linux)" unless File.directory?("/proc/self")
        Bench::Processes.children(parent)
      end

      # Seconds the main thread of process `pid` (a worker's reactor) has spent waiting for a
      # core since it started: runnable, not running (the second field of Linux's scheduler
      # statistics). For tests whose behaviour needs a process to run within a bound: a wait for
      # a core of that length or more, in total over the span, makes its failure the machine's.
      # @return [Float, nil] nil where the statistics are not kept, or the process is gone
      def core_wait_of(pid)
        Weft::ThreadStatistics.parse(File.read("/proc/#{pid}/task/#{pid}/schedstat"))&.last
      rescue SystemCallError
        nil
      end

      # Runs requests on fresh connections in a thread while the block runs; the block gets the
      # live counts.
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
        yield counts
        stop = true
        loader.join
        counts
      end

      # Runs `clients` keep-alive clients in threads while the block runs, each POSTing to
      # `path` in a loop on its connection and reconnecting only after a response that said
      # `connection: close`. The default path takes 20 ms, so that most clients have a request
      # in flight at any moment (as on a loaded server). The block gets the live counts, and a
      # proc that returns the pids (the bodies of `pid.ru`) that have answered the clients so
      # far. A request that fails on a connection whose previous response did
      # not say close is counted as "kept-alive <error>": the server broke its keep-alive
      # promise, and the client cannot know whether its POST was processed.
      # @return [Hash] :ok, :closed (responses with connection: close), "refused" (connect
      #   failed: nothing was sent) and failures, by "kept-alive ..." / "fresh ..." and class
      def under_keep_alive_load(port, clients: 30, path: "/sleep?s=0.02")
        counts = Hash.new(0)
        lock = Mutex.new
        count = ->(key) { lock.synchronize { counts[key] += 1 } }
        answered = []
        answered_by = -> { lock.synchronize { answered.dup } }
        stop = false
        threads = Array.new(clients) do
          Thread.new do
            socket = nil
            kept_alive = false
            deadline = Weft::Timers.now + 60
            until stop || Weft::Timers.now > deadline
              begin
                socket ||= TCPSocket.new("127.0.0.1", port)
              rescue SystemCallError
                count.call("refused")
                sleep 0.01
                next
              end
              begin
                socket.write("POST #{path} HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello")
                raise Timeout::Error, "no response in 10 s" unless socket.wait_readable(10)
                response = read_response(socket)
                pid = response.body[/\A\d+\z/]
                count.call(pid ? :ok : :bad_body)
                lock.synchronize { answered << pid.to_i unless answered.include?(pid.to_i) } if pid
                if response["connection"] == "close"
                  count.call(:closed)
                  socket.close
                  socket = nil
                  kept_alive = false
                else
                  kept_alive = true
                end
              rescue StandardError => e
                count.call("#{kept_alive ? 'kept-alive' : 'fresh'} #{e.class}")
                socket&.close
                socket = nil
                kept_alive = false
              end
            end
            socket&.close
          end
        end
        yield counts, answered_by
        stop = true
        threads.each(&:join)
        counts
      end
    end
  end
end
