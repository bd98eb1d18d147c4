# frozen_string_literal: true

# How long a master's stop (TERM) takes when its worker gets the master's TERM before it has
# trapped its own signals: a one-worker preloaded cluster of the cluster tests' app with
# `shutdown_timeout 10`, its replacement worker held in a Process._fork hook (run in the child
# before Cluster#run_worker, as a library's after-fork hook is) until 1 s after the master logged
# "stopping". Before the fix the worker lost the TERM, and the master waited shutdown_timeout +
# 5 s for it; now it exits when the hook returns.
#
#   bundle exec ruby bench/server/fork_window_stop.rb [RUNS] [EXE]   (EXE: another exe/weft, e.g.
#                                                                    an older checkout's)
#
# Prints one line per run: seconds from TERM to the master's exit, and the load average.

require "tmpdir"
require "rbconfig"
require_relative "../support/ports"
require_relative "../support/processes"

ROOT = File.expand_path("../..", __dir__)
HOOK = <<~RUBY
  Process.singleton_class.prepend(Module.new do
    def _fork
      pid = super
      if pid.zero? && File.exist?(ENV.fetch("HOLD")) && !File.exist?(ENV.fetch("GO"))
        File.write(ENV.fetch("HELD"), Process.pid.to_s)
        sleep 0.02 until File.exist?(ENV.fetch("GO"))
      end
      pid
    end
  end)
RUBY

def run_once(exe)
  Dir.mktmpdir do |dir|
    env = %w[HOLD GO HELD].to_h { |name| [name, File.join(dir, name.downcase)] }
    File.write(File.join(dir, "weft.rb"), "workers 1\npreload true\nshutdown_timeout 10\n#{HOOK}")
    log = File.join(dir, "weft.log")
    port = Bench.free_port
    pid = Process.spawn(env, RbConfig.ruby, exe, "serve", File.join(ROOT, "test/server/fixtures/pid.ru"), "-C",
                        File.join(dir, "weft.rb"), "-p", port.to_s, "-o", "127.0.0.1", out: log, err: log, pgroup: true)
    begin
      first = Bench::Processes.wait_until(30, "the first worker") { Bench::Processes.children(pid).first }
      File.write(env["HOLD"], "")
      Process.kill("KILL", first) # its replacement is held in the hook
      Bench::Processes.wait_until(30, "the replacement held") { File.size?(env["HELD"]) }
      started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      load = File.read("/proc/loadavg").split.first
      Process.kill("TERM", pid)
      Bench::Processes.wait_until(30, "the master stopping") { File.read(log).include?("stopping:") }
      sleep 1
      File.write(env["GO"], "")
      Process.waitpid(pid)
      pid = nil
      format("master exited %.2f s after TERM (load %s)%s", Process.clock_gettime(Process::CLOCK_MONOTONIC) - started, load,
             File.read(log).include?("before it booted") ? "; the worker stopped on the TERM" : "")
    ensure
      Process.kill("KILL", -pid) if pid && Process.waitpid(pid, Process::WNOHANG).nil?
    end
  end
end

runs = Integer(ARGV[0] || 2)
exe = ARGV[1] || File.join(ROOT, "exe/weft")
runs.times { puts run_once(exe) }
