# frozen_string_literal: true

# The HTTP client's own cost per request on one plain-HTTP keep-alive connection: CPU time of
# the client process, objects allocated and system calls per GET, for Weft::HTTP::Client and
# Net::HTTP (one session) side by side, against bench/http_client/upstream.rb without TLS (so
# Weft's reads are Weft::Stream's recv from C; sequential_https.rb measures the TLS path).
#
#   bundle exec ruby bench/http_client/keep_alive_cpu.rb [REQUESTS] [OTHER_CHECKOUT...]
#       (default 20000 GETs per client; ROUNDS=3)
#
# Each measurement runs in a process of its own, from its checkout's lib/ and bundle; with other
# checkouts of Weft (e.g. `git worktree add --detach /tmp/weft-before <commit>`, extensions
# compiled) they take turns ROUNDS times: before and after side by side. System calls are
# counted with `strace -c -f` in one more run per checkout, when strace is installed. Prints a
# Markdown table; CPU time, unlike wall time, barely moves when other jobs share the machine.
require_relative "../support/bundle"
require_relative "support"
require "json"
require "open3"
require "rbconfig"

module KeepAliveCPU
  ROOT = Bench::ROOT
  ROUNDS = Integer(ENV.fetch("ROUNDS", "3"))

  # Runs in the measuring process: ARGV = port, requests. Prints one JSON line.
  CLIENT = <<~'RUBY'
    require "weft/http"
    require "net/http"
    require "json"
    port, requests = ARGV.map { |arg| Integer(arg) }
    measure = lambda do |get|
      200.times { get.call } # warm-up: method caches, the connection
      GC.start
      objects = GC.stat(:total_allocated_objects)
      cpu = Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID)
      requests.times { get.call }
      { cpu_us: (Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID) - cpu) * 1e6 / requests,
        objects: (GC.stat(:total_allocated_objects) - objects).to_f / requests }
    end
    client = Weft::HTTP::Client.new("http://127.0.0.1:#{port}", proxy: nil)
    net_http = Net::HTTP.start("127.0.0.1", port)
    which = ENV.fetch("ONLY", "both")
    result = {}
    result[:weft] = measure.call(-> { client.get("/").body }) unless which == "net_http"
    result[:net_http] = measure.call(-> { net_http.get("/").body }) unless which == "weft"
    puts JSON.generate(result)
  RUBY

  module_function

  def run(requests, others)
    checkouts = [ROOT, *others.map { |dir| File.expand_path(dir) }]
    port = Bench.free_port
    upstream = Bench.spawn_server([RbConfig.ruby, File.join(__dir__, "upstream.rb"), port.to_s, "0"], port, "plain_upstream")
    puts "| checkout | commit | round | Weft CPU µs / GET | Weft objects / GET | Net::HTTP CPU µs / GET | Net::HTTP objects / GET |"
    puts "|---|---|---:|---:|---:|---:|---:|"
    ROUNDS.times do |round|
      checkouts.each do |checkout|
        figures = JSON.parse(client(checkout, port, requests))
        puts format("| %s | %s | %d | %.2f | %.2f | %.2f | %.2f |", checkout, commit(checkout), round + 1,
                    figures["weft"]["cpu_us"], figures["weft"]["objects"],
                    figures["net_http"]["cpu_us"], figures["net_http"]["objects"])
      end
    end
    checkouts.each { |checkout| puts "", syscalls(checkout, port, requests) } if system("which strace > /dev/null")
  ensure
    Bench::Processes.stop(upstream)
  end

  # @return [String] the client's JSON line
  def client(checkout, port, requests, prefix: [], only: "both")
    env = { "BUNDLE_GEMFILE" => WeftGemfile.for_ruby(checkout), "ONLY" => only }
    out, status = Open3.capture2(env, *prefix, RbConfig.ruby, "-I", File.join(checkout, "lib"), "-e", CLIENT,
                                 port.to_s, requests.to_s, chdir: checkout)
    raise "client failed in #{checkout}" unless status.success?
    out.lines.last
  end

  # @return [String] Weft's system calls per GET (the warm-up's 200 included in the count)
  def syscalls(checkout, port, requests)
    summary = File.join(ROOT, "tmp", "keep-alive-strace.txt")
    Dir.mkdir(File.dirname(summary)) unless Dir.exist?(File.dirname(summary))
    client(checkout, port, requests, prefix: ["strace", "-c", "-f", "-o", summary], only: "weft")
    out = +"System calls per Weft GET, #{checkout} (`strace -c -f`, the whole process; those at 0.05 or more):\n\n"
    File.foreach(summary) do |line|
      fields = line.split
      next unless fields.size >= 5 && fields[3] =~ /\A\d+\z/
      calls = fields[3].to_f / (requests + 200)
      out << format("- %s %.2f\n", fields.last, calls) unless fields.last == "total" || calls < 0.05
    end
    out
  end

  def commit(checkout)
    `git -C #{checkout} rev-parse --short HEAD`.strip
  end
end

KeepAliveCPU.run(Integer(ARGV.fetch(0, "20000")), ARGV.drop(1)) if $PROGRAM_NAME == __FILE__
