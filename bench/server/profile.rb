# frozen_string_literal: true

# Where a hello-world request's time goes in Weft's server, in one command:
#
#   bundle exec ruby bench/server/profile.rb [connections]     (default 50; PROFILE_SECONDS=5)
#
# Starts `weft serve -w 0` on a hello-world app (bench/server/profile_app.ru) and drives it with
# `wrk -t1 -cN`, then prints, per request:
#   - CPU time of the server process (user + system, from /proc), the figure the changes
#     aim at: unlike requests/s it barely moves when other jobs share the machine;
#   - objects allocated (GC.stat, the app's own three objects included);
#   - method calls (Ruby methods, C functions, blocks), counted exactly by a TracePoint (with
#     PROFILE_CALLS=1, the 40 most called);
#   - system calls (`strace -c -f` during a second wrk run, when strace is installed);
#   - the hottest methods (StackProf, cpu mode) during a third run.
require "bundler/setup"
require "json"
require "net/http"
require "rbconfig"
require_relative "../support/ports"

module ServerProfile
  ROOT = File.expand_path("../..", __dir__)
  APP = File.join(__dir__, "profile_app.ru")
  SECONDS = Integer(ENV.fetch("PROFILE_SECONDS", "5"))

  module_function

  def run(connections)
    port = Bench.free_port
    pid = spawn({ "RACK_ENV" => "production" }, RbConfig.ruby, File.join(ROOT, "exe/weft"), "serve", APP,
                "-o", "127.0.0.1", "-p", port.to_s, "-w", "0", "-q")
    wait_until_up(port)
    wrk(port, connections, 2) # warm-up
    puts "weft #{weft_version}, #{RUBY_DESCRIPTION}"
    puts "wrk -t1 -c#{connections} -d#{SECONDS}s, hello world, one server process"
    counters(port, connections)
    calls(port, connections)
    syscalls(port, connections, pid)
    hot_methods(port, connections)
  ensure
    if pid
      Process.kill(:TERM, pid)
      Process.wait(pid)
    end
  end

  def counters(port, connections)
    before = control(port, "start")
    requests = wrk(port, connections, SECONDS)
    after = control(port, "counters")
    cpu = after["cpu"] - before["cpu"]
    allocations = after["allocations"] - before["allocations"]
    printf("requests/s           %10.0f\n", requests / SECONDS.to_f)
    printf("CPU per request      %10.2f us\n", cpu * 1e6 / requests)
    printf("objects per request  %10.2f (the app's own 3 included)\n", allocations.to_f / requests)
  end

  # Counted with a TracePoint, which slows the server down but counts exactly: a figure that
  # does not drift with the machine's load, unlike the CPU time.
  def calls(port, connections)
    control(port, "calls/start")
    requests = wrk(port, connections, 2)
    counts = control(port, "calls/stop")
    printf("method calls per request: Ruby %.1f, C %.1f, blocks %.1f (the start/stop requests included)\n",
           *%w[call c_call b_call].map { |event| counts["events"].fetch(event, 0).to_f / requests })
    return unless ENV["PROFILE_CALLS"]
    counts["methods"].each { |name, count| printf("  %6.2f  %s\n", count.to_f / requests, name) }
  end

  def syscalls(port, connections, pid)
    return puts("system calls: strace is not installed") unless system("which strace > /dev/null")
    summary = File.join(ROOT, "tmp", "profile-strace.txt")
    Dir.mkdir(File.dirname(summary)) unless Dir.exist?(File.dirname(summary))
    strace = spawn("strace", "-c", "-f", "-p", pid.to_s, "-o", summary, err: File::NULL)
    sleep 1 # attached
    requests = wrk(port, connections, SECONDS)
    Process.kill(:INT, strace)
    Process.wait(strace)
    puts "system calls per request (under strace, which slows the server down):"
    File.foreach(summary) do |line|
      fields = line.split
      next unless fields.size >= 5 && fields[3] =~ /\A\d+\z/
      calls = fields[3].to_i
      name = fields.last
      next if name == "total" || calls < requests / 100
      printf("  %-16s %8.3f\n", name, calls.to_f / requests)
    end
  end

  def hot_methods(port, connections)
    control(port, "stackprof/start")
    wrk(port, connections, SECONDS)
    report = control(port, "stackprof/stop")
    puts "hottest methods (StackProf cpu mode, self samples):"
    report["frames"].each { |frame| printf("  %5.1f%%  %s\n", frame["percent"], frame["name"]) }
  end

  def control(port, action)
    JSON.parse(Net::HTTP.get(URI("http://127.0.0.1:#{port}/__profile/#{action}")))
  end

  # @return [Integer] requests completed
  def wrk(port, connections, seconds)
    output = IO.popen(["wrk", "-t1", "-c#{connections}", "-d#{seconds}s", "http://127.0.0.1:#{port}/"], &:read)
    Integer(output[/(\d+) requests in/, 1])
  end

  def wait_until_up(port)
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 15
    begin
      TCPSocket.new("127.0.0.1", port).close
    rescue SystemCallError
      raise "weft did not start" if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
      sleep 0.1
      retry
    end
  end

  def weft_version
    require File.join(ROOT, "lib/weft/version")
    Weft::VERSION
  end
end

ServerProfile.run(Integer(ARGV.fetch(0, "50"))) if $PROGRAM_NAME == __FILE__
