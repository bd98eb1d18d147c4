# frozen_string_literal: true

# What a burst of connections costs a Weft server process in memory:
#
#   bundle exec ruby bench/server/connection_burst.rb      (BURST=10000 connections per kind)
#   BURST_COMPARE=/other/checkout bundle exec ruby bench/server/connection_burst.rb
#                                       also measures that checkout's exe/weft, side by side
#
# For each kind of client (bench/server/burst_client.rb: keepalive, slowloris, silent), a fresh
# single-process server (`weft serve bench/server/app.ru -w 0`, max_connections 20,000,
# backlog 4,096) is warmed with 20 requests; then BURST connections are opened at once from
# another process and held. Reported from /proc/PID/status: RSS before, RSS while the
# connections are held (2 s after the last one opened), peak RSS (VmHWM), and RSS 2 s after
# the clients closed them; and the server's own fiber and parked-connection counts.
#
# Writes bench/results/connection_burst.md.
require_relative "../support/bundle"
require "json"
require "net/http"
require "rbconfig"
require "socket"
require "tmpdir"

ROOT = File.expand_path("../..", __dir__)
require_relative "../support/report"
require_relative "../support/ports"

module ConnectionBurst
  COUNT = Integer(ENV.fetch("BURST", "10000"))
  KINDS = %w[keepalive slowloris silent].freeze
  APP = File.join(ROOT, "bench/server/app.ru")
  CLIENT = File.join(ROOT, "bench/server/burst_client.rb")
  REPORT = File.join(ROOT, "bench/results/connection_burst.md")
  BUDGET_MB = 64

  module_function

  def run
    limit = Process.getrlimit(:NOFILE)[1]
    abort "ulimit -n hard limit #{limit} is below #{COUNT + 100}: raise it (e.g. ulimit -Hn 20000)" if limit < COUNT + 100
    Process.setrlimit(:NOFILE, limit) # inherited by the server and the client
    checkouts = [ROOT, ENV["BURST_COMPARE"]].compact.map { |dir| File.expand_path(dir) }
    rows = KINDS.flat_map { |kind| checkouts.map { |dir| measure(kind, dir) } }
    write_report(rows, limit)
    puts File.read(REPORT)
  end

  # @return [String] "main@0fd7136" for a git checkout
  def revision(dir)
    branch = `git -C #{dir} rev-parse --abbrev-ref HEAD 2>/dev/null`.strip
    commit = `git -C #{dir} rev-parse --short HEAD 2>/dev/null`.strip
    commit.empty? ? File.basename(dir) : "#{branch}@#{commit}"
  end

  def measure(kind, dir)
    Dir.mktmpdir do |tmp|
      config = File.join(tmp, "weft.rb")
      File.write(config, "backlog 4096\nmax_connections 20_000\nstats_path \"/stats\"\n")
      port = Bench.free_port
      log = File.join(tmp, "server.log")
      # Each checkout runs with its own bundle, so that its lib (not this one's) is loaded.
      env = { "RACK_ENV" => "production", "BUNDLE_GEMFILE" => WeftGemfile.for_ruby(dir) }
      pid = Process.spawn(env, RbConfig.ruby, File.join(dir, "exe/weft"), "serve", APP,
                          "-w", "0", "-q", "-C", config, "-b", "tcp://127.0.0.1:#{port}", out: log, err: log)
      begin
        wait_until_serving(port, pid, log)
        20.times { Net::HTTP.get(URI("http://127.0.0.1:#{port}/")) }
        before = status(pid, "VmRSS")
        client = IO.popen([RbConfig.ruby, CLIENT, port.to_s, COUNT.to_s, kind], "r+")
        started = now
        ready = client.gets.to_s.strip
        opened = now - started
        sleep 2
        held = status(pid, "VmRSS")
        peak = status(pid, "VmHWM")
        stats = JSON.parse(Net::HTTP.get(URI("http://127.0.0.1:#{port}/stats")))["workers"][0]
        client.close_write
        client.read
        client.close
        sleep 2
        after = status(pid, "VmRSS")
        row = { kind: kind, weft: revision(dir), ready: ready, opened: opened, before: before, held: held, peak: peak, after: after,
                fibers: stats["fibers"], idle: stats["connections_idle"], open: stats["connections_open"] }
        warn format("%-9s %-20s %s in %.1fs: RSS %d -> %d MB (peak %d, after close %d), fibers %d, parked %d",
                    kind, row[:weft], ready, opened, before / 1024, held / 1024, peak / 1024, after / 1024, row[:fibers], row[:idle])
        row
      ensure
        begin
          Process.kill("TERM", pid)
          Process.wait(pid)
        rescue Errno::ESRCH, Errno::ECHILD
          nil # it died already; the error says why
        end
      end
    end
  end

  # @return [Integer] a /proc/PID/status field, in KB
  def status(pid, field)
    File.read("/proc/#{pid}/status")[/^#{field}:\s+(\d+)/, 1].to_i
  end

  def write_report(rows, limit)
    report = Bench::Report.new("Connection bursts: server memory", command: "bundle exec ruby bench/server/connection_burst.rb")
    report.paragraph(<<~TEXT)
      #{COUNT} connections opened at once against one Weft process (`weft serve bench/server/app.ru -w 0`,
      backlog 4,096, max_connections 20,000; ulimit -n #{limit}), by kind of client
      (bench/server/burst_client.rb): **keepalive** — one GET each, response read, then idle;
      **slowloris** — a request line and half a header, never finished (header_timeout 10 s is
      longer than the measurement); **silent** — connected, nothing sent. RSS from /proc: before,
      while held (2 s after the last connection opened), peak (VmHWM) and 2 s after the clients
      closed them. Budget: #{BUDGET_MB} MB of growth for #{COUNT} connections.
    TEXT
    report.table(
      ["kind", "weft", "client", "opened in", "RSS before", "RSS held", "growth", "per connection", "peak", "after close", "fibers", "parked"],
      rows.map do |row|
        growth = row[:held] - row[:before]
        [row[:kind], row[:weft], row[:ready], format("%.1f s", row[:opened]), mb(row[:before]), mb(row[:held]),
         mb(growth), format("%.1f KB", growth.to_f / COUNT), mb(row[:peak]), mb(row[:after]), row[:fibers], row[:idle]]
      end
    )
    report.chart("RSS growth while #{COUNT} connections are held (MB)",
                 rows.map { |row| ["#{row[:kind]} #{row[:weft]}", (row[:held] - row[:before]) / 1024.0] }, format: "%.1f MB")
    report.write(REPORT)
  end

  def mb(kb)
    format("%.1f MB", kb / 1024.0)
  end


  def wait_until_serving(port, pid, log)
    deadline = now + 20
    begin
      TCPSocket.new("127.0.0.1", port).close
    rescue SystemCallError
      if now > deadline || Process.waitpid(pid, Process::WNOHANG)
        raise "the server did not listen on #{port}:\n#{File.read(log)}"
      end
      sleep 0.05
      retry
    end
  end

  def now
    Process.clock_gettime(Process::CLOCK_MONOTONIC)
  end
end

ConnectionBurst.run if $PROGRAM_NAME == __FILE__
