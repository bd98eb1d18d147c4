# frozen_string_literal: true

# Where a hello-world request's time goes in Weft's server, in one command:
#
#   bundle exec ruby bench/server/profile.rb [connections] [OTHER_CHECKOUT...]
#       (default 50 connections; PROFILE_SECONDS=5, ROUNDS=2)
#
# Starts `weft serve -w 0` on a hello-world app (bench/server/profile_app.ru) and drives it with
# `wrk -t1 -cN`. Per request it measures:
#   - CPU time of the server process (user + system, its own clock), the figure the changes
#     aim at: unlike requests/s it barely moves when other jobs share the machine;
#   - objects allocated (GC.stat, the app's own three objects included), and the GC's work for
#     them: collections (minor + major) and GC time per 10,000 requests. A minor collection
#     marks every live fiber's stacks, so its cost grows with the connections being served;
#   - method calls (Ruby methods, C functions, blocks), counted exactly by a TracePoint (with
#     PROFILE_CALLS=1, the 40 most called are printed);
#   - system calls (`strace -c -f` during a second wrk run, when strace is installed);
#   - the hottest methods (StackProf, cpu mode);
#   - objects allocated per request by class and site (ObjectSpace's allocation tracing).
# With other checkouts of Weft (e.g. `git worktree add --detach /tmp/weft-before <commit>`, its
# extensions compiled), the first two figures are measured for each, the servers taking turns
# ROUNDS times, each run from its own tree and bundle: before and after side by side.
# Writes bench/results/server-profile.md (server-profile-ruby-3.3.md on Ruby 3.3).
require_relative "../support/bundle"
require "json"
require "net/http"
require "rbconfig"
require_relative "../support/ports"

module ServerProfile
  ROOT = File.expand_path("../..", __dir__)
  APP = File.join(__dir__, "profile_app.ru")
  SECONDS = Integer(ENV.fetch("PROFILE_SECONDS", "5"))
  ROUNDS = Integer(ENV.fetch("ROUNDS", "2"))
  SUFFIX = RUBY_VERSION.start_with?("3.1.") ? "" : "-ruby-#{RUBY_VERSION[/\A\d+\.\d+/]}"
  REPORT = File.join(ROOT, "bench/results/server-profile#{SUFFIX}.md")

  module_function

  def run(connections, others)
    checkouts = [ROOT, *others.map { |dir| File.expand_path(dir) }]
    out = +"# Server: cost of a hello-world request\n\n"
    out << "Produced by `bundle exec ruby bench/server/profile.rb #{connections}#{' OTHER_CHECKOUT' unless others.empty?}` " \
           "on #{Time.now.utc.strftime('%Y-%m-%d %H:%M UTC')}: #{RUBY_DESCRIPTION}" \
           "#{' (RUBY_YJIT_ENABLE=1)' if ENV['RUBY_YJIT_ENABLE'] == '1'}, `wrk -t1 -c#{connections} -d#{SECONDS}s`, " \
           "one server process, #{Etc.nprocessors} CPUs shared with wrk.\n\n"
    out << "| checkout | commit | round | requests/s | CPU µs per request | objects per request | " \
           "GC runs (minor + major) / ms per 10k requests | Ruby / C calls, blocks per request |\n"
    out << "|---|---|---:|---:|---:|---:|---:|---|\n"
    ROUNDS.times do |round|
      checkouts.each do |checkout|
        row = serving(checkout, connections) { |port| [counters(port, connections), calls(port, connections)] }
        figures, calls = row
        out << format("| %s | %s | %d | %.0f | %.2f | %.2f | %.2f + %.2f / %.1f | %.1f / %.1f / %.1f |\n", checkout,
                      commit(checkout), round + 1, figures[:rps], figures[:cpu_us], figures[:objects], figures[:minor_gcs],
                      figures[:major_gcs], figures[:gc_ms], *calls)
        $stderr.puts out.lines.last
      end
    end
    out << "\nThe app's own three objects per request (its response) are included. Calls are counted by " \
           "a TracePoint (Ruby's specialised instructions count as C calls then).\n\n"
    serving(ROOT, connections) do |port, pid|
      out << syscalls(port, connections, pid) << "\n" << hot_methods(port, connections) << "\n" <<
        allocation_sites(port, connections)
    end
    File.write(REPORT, out)
    puts out
  end

  # Runs `weft serve` from `checkout` (its own lib/ and bundle) on the profile app and yields
  # its port and pid after a warm-up.
  def serving(checkout, connections)
    port = Bench.free_port
    env = { "RACK_ENV" => "production", "BUNDLE_GEMFILE" => WeftGemfile.for_ruby(checkout) }
    # bundler/setup (inherited through RUBYOPT) loads the bundle BUNDLE_GEMFILE names
    pid = spawn(env, RbConfig.ruby, File.join(checkout, "exe/weft"), "serve", APP, "-o", "127.0.0.1", "-p", port.to_s,
                "-w", "0", "-q", chdir: checkout)
    wait_until_up(port)
    wrk(port, connections, 2)
    yield port, pid
  ensure
    if pid
      Process.kill(:TERM, pid)
      Process.wait(pid)
    end
  end

  # @return [Hash] :rps, :cpu_us and :objects per request; :minor_gcs, :major_gcs and :gc_ms
  #   per 10,000 requests
  def counters(port, connections)
    before = control(port, "start")
    requests = wrk(port, connections, SECONDS)
    after = control(port, "counters")
    per = ->(key, scale = 1) { (after[key] - before[key]).to_f * scale / requests }
    { rps: requests / SECONDS.to_f, cpu_us: per.call("cpu", 1e6), objects: per.call("allocations"),
      minor_gcs: per.call("minor_gcs", 10_000), major_gcs: per.call("major_gcs", 10_000), gc_ms: per.call("gc_ms", 10_000) }
  end

  # Counted with a TracePoint, which slows the server down but counts exactly: a figure that
  # does not drift with the machine's load, unlike the CPU time.
  # @return [Array(Float, Float, Float)] Ruby calls, C calls and blocks per request
  def calls(port, connections)
    control(port, "calls/start")
    requests = wrk(port, connections, 2)
    counts = control(port, "calls/stop")
    counts["methods"].each { |name, count| warn format("  %6.2f  %s", count.to_f / requests, name) } if ENV["PROFILE_CALLS"]
    %w[call c_call b_call].map { |event| counts["events"].fetch(event, 0).to_f / requests }
  end

  # @return [String] a Markdown section
  def syscalls(port, connections, pid)
    return "System calls: strace is not installed.\n" unless system("which strace > /dev/null")
    summary = File.join(ROOT, "tmp", "profile-strace.txt")
    Dir.mkdir(File.dirname(summary)) unless Dir.exist?(File.dirname(summary))
    strace = spawn("strace", "-c", "-f", "-p", pid.to_s, "-o", summary, err: File::NULL)
    sleep 1 # attached
    requests = wrk(port, connections, SECONDS)
    Process.kill(:INT, strace)
    Process.wait(strace)
    out = +"System calls per request (`strace -c -f`, this checkout; strace slows the server down), those at 0.01 or more:\n\n"
    File.foreach(summary) do |line|
      fields = line.split
      next unless fields.size >= 5 && fields[3] =~ /\A\d+\z/
      calls = fields[3].to_i
      name = fields.last
      next if name == "total" || calls < requests / 100
      out << format("- %s %.3f\n", name, calls.to_f / requests)
    end
    out
  end

  # @return [String] a Markdown section
  def hot_methods(port, connections)
    control(port, "stackprof/start")
    wrk(port, connections, SECONDS)
    report = control(port, "stackprof/stop")
    out = +"Hottest methods (StackProf cpu mode, this checkout, share of samples spent in the method itself):\n\n"
    report["frames"].each { |frame| out << format("- %.1f%% %s\n", frame["percent"], frame["name"]) }
    out
  end

  # Counted with ObjectSpace's allocation tracing (and the GC off) during a short run: exact
  # counts, though the tracing slows the server down.
  # @return [String] a Markdown section
  def allocation_sites(port, connections)
    control(port, "allocations/start")
    requests = wrk(port, connections, 2)
    sites = control(port, "allocations/stop")["sites"]
    out = +"Objects allocated per request by site (ObjectSpace.trace_object_allocations, this checkout, " \
           "#{requests} requests; an object made in C is charged to the Ruby line that called into C), " \
           "those at 0.01 or more:\n\n"
    sites.each do |site, count|
      out << format("- %.2f %s\n", count.to_f / requests, site) if count >= requests / 100
    end
    out
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

  def commit(checkout)
    `git -C #{checkout} rev-parse --short HEAD`.strip
  end
end

if $PROGRAM_NAME == __FILE__
  require "etc"
  ServerProfile.run(Integer(ARGV.fetch(0, "50")), ARGV.drop(1))
end
