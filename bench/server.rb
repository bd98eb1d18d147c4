# frozen_string_literal: true

# Weft vs Puma, Falcon, Iodine (C) and Itsi (Rust), side by side in one run, with load from wrk
# and ab:
#
#   bundle exec ruby bench/server.rb            (BENCH_DURATION=10 seconds per wrk run)
#   PATH=~/.cache/weft/rubies/ruby-3.3/bin:$PATH RUBY_YJIT_ENABLE=1 bundle exec ruby bench/server.rb
#                                               (Ruby 3.3 + YJIT; its extension built first, see bin/setup)
#   BENCH_WEFT_BEFORE=DIR bundle exec ruby bench/server.rb
#                                               (also another checkout of Weft, its extension built,
#                                               e.g. `git worktree add --detach DIR <commit>`, on the
#                                               hello-world rows: before and after a change in one run)
#
# Scenarios (all servers: one process, same app bench/server/app.ru, RACK_ENV=production; Iodine
# and Itsi with one Ruby thread for hello world, their best there, and 16 for the I/O-bound rows):
#   hello world, 50 and 256 connections   wrk -t1 -cN -dD /
#   sleep 10 ms, 256 connections          wrk -t1 -c256 -dD /sleep
#   10 x select pg_sleep(1)               ab -c10 -n10 /pg   (private PostgreSQL cluster)
#   10,000 idle keep-alive connections    RSS of the server before/after (bench/server/idle_client.rb)
#
# Writes bench/results/server.md (tables, ratios, charts) and bench/results/server.raw (tool output).
require_relative "support/bundle"
require "etc"
require "fileutils"
require "net/http"
require "rbconfig"
require "socket"
require "timeout"

ROOT = File.expand_path("..", __dir__)
$LOAD_PATH.unshift(File.join(ROOT, "lib"), File.join(ROOT, "test"))
require "weft/version"
require "support/postgres_cluster"
require_relative "support/ports"
require_relative "support/processes"
require_relative "support/results"

module ServerBench
  APP = File.join(ROOT, "bench/server/app.ru")
  DURATION = Integer(ENV.fetch("BENCH_DURATION", "10"))
  IDLE_CONNECTIONS = Integer(ENV.fetch("BENCH_IDLE", "10000"))
  ROUNDS = Integer(ENV.fetch("BENCH_ROUNDS", "2"))
  # Which servers each kind of row compares: Iodine and Itsi run the app on Ruby threads,
  # one is their fastest for hello world, and 16 let I/O-bound requests overlap.
  BEFORE = ENV["BENCH_WEFT_BEFORE"]&.then { |dir| File.expand_path(dir) }
  BEFORE_NAME = BEFORE && "weft #{`git -C #{BEFORE} rev-parse --short HEAD`.strip}"
  HELLO_SERVERS = ["weft", BEFORE_NAME, "puma", "falcon", "iodine -t 1", "itsi -t 1"].compact.freeze
  IO_SERVERS = ["weft", "puma", "falcon", "iodine -t 16", "itsi -t 16"].freeze
  THROUGHPUT = [
    ["hello, 50 connections", "/", 50, HELLO_SERVERS],
    ["hello, 256 connections", "/", 256, HELLO_SERVERS],
    ["sleep 10 ms, 256 connections", "/sleep", 256, IO_SERVERS]
  ].freeze
  # Ruby 3.1 writes server.md; another Ruby (bin/test --ruby 3.3's, with RUBY_YJIT_ENABLE=1)
  # writes server-ruby-3.3.md beside it.
  SUFFIX = RUBY_VERSION.start_with?("3.1.") ? "" : "-ruby-#{RUBY_VERSION[/\A\d+\.\d+/]}"
  RAW = File.join(ROOT, "bench/results/server#{SUFFIX}.raw")
  REPORT = File.join(ROOT, "bench/results/server#{SUFFIX}.md")

  # How each server is started: one process each, Puma with 5 threads. Itsi runs in a directory
  # of its own, whose Itsi.rb raises its request backlog: by default (30 per thread) it answers
  # 503 to most requests once more than 30 wait, which wrk's 50 connections do.
  ITSI_DIR = File.join(ROOT, "tmp", "bench-itsi")
  ITSI_CONFIG = "ruby_thread_request_backlog_size 4096\n"
  SERVERS = {
    "weft" => ->(port) { [RbConfig.ruby, File.join(ROOT, "exe/weft"), "serve", APP, "-o", "127.0.0.1", "-p", port.to_s, "-w", "0", "-q"] },
    "puma" => ->(port) { [RbConfig.ruby, Gem.bin_path("puma", "puma"), "-w", "0", "-t", "5:5", "-b", "tcp://127.0.0.1:#{port}", "-e", "production", "-q", APP] },
    "falcon" => ->(port) { [RbConfig.ruby, Gem.bin_path("falcon", "falcon"), "serve", "--forked", "-n", "1", "-b", "http://127.0.0.1:#{port}", "-c", APP] },
    "iodine -t 1" => ->(port) { iodine(port, 1) },
    "itsi -t 1" => ->(port) { itsi(port, 1) },
    "iodine -t 16" => ->(port) { iodine(port, 16) },
    "itsi -t 16" => ->(port) { itsi(port, 16) },
    # from its own tree and bundle (its lib/, not this one's)
    BEFORE_NAME => lambda do |port|
      [{ "BUNDLE_GEMFILE" => WeftGemfile.for_ruby(BEFORE) }, RbConfig.ruby, File.join(BEFORE, "exe/weft"), "serve", APP,
       "-o", "127.0.0.1", "-p", port.to_s, "-w", "0", "-q"]
    end
  }.reject { |name, _| name.nil? }.freeze

  module_function

  def iodine(port, threads)
    [RbConfig.ruby, Gem.bin_path("iodine", "iodine"), "-w", "1", "-t", threads.to_s, "-b", "127.0.0.1", "-p", port.to_s, APP]
  end

  def itsi(port, threads)
    [RbConfig.ruby, Gem.bin_path("itsi-server", "itsi"), "-w", "1", "-t", threads.to_s, "-r", APP, "-b", "http://127.0.0.1:#{port}"]
  end

  def run
    raise "wrk and ab are needed: apt-get install -y wrk apache2-utils" unless tool?("wrk") && tool?("ab")
    limit = Process.getrlimit(:NOFILE)[1]
    Process.setrlimit(:NOFILE, limit) # ulimit -n as high as allowed, inherited by servers and clients
    FileUtils.mkdir_p(File.dirname(RAW))
    @raw = File.open(RAW, "w")
    postgres = Weft::Test::PostgresCluster.new.start
    ENV["PG_CONNINFO"] = postgres.conninfo
    ENV["RACK_ENV"] = "production"
    results = Hash.new { |hash, key| hash[key] = {} }
    with_servers(SERVERS.keys) do |running|
      running.each { |name, (port, pid)| log "== #{name} (pid #{pid}, port #{port})"; wrk(port, "/", 10, 2) } # warm-up
      # Each throughput figure is the better of two runs, the servers taking turns in
      # alternating order, so that drift in the shared machine's load hits all of them alike.
      THROUGHPUT.each do |title, path, connections, servers|
        ROUNDS.times do |round|
          order = round.even? ? servers : servers.reverse
          order.each do |name|
            row = wrk(running[name][0], path, connections, DURATION)
            best = results[title][name]
            results[title][name] = row if best.nil? || row[:rps] > best[:rps]
          end
        end
      end
      IO_SERVERS.each { |name| results["10 x pg_sleep(1), ab -c10 -n10"][name] = ab_pg(running[name][0]) }
      %w[weft puma falcon].each { |name| results["10,000 idle keep-alive connections"][name] = idle_rss(*running[name]) }
    end
    write_report(results, limit)
    puts File.read(REPORT)
  ensure
    postgres&.destroy
    @raw&.close
  end

  def tool?(name)
    system("command -v #{name} > /dev/null 2>&1")
  end

  def log(text)
    puts text
    @raw&.puts(text) # nil when only a part runs (bench/server/idle_rss.rb)
    @raw&.flush
  end

  # Starts every server (each idles while another is measured), yields {name => [port, pid]}.
  def with_servers(names)
    running = {}
    FileUtils.mkdir_p(ITSI_DIR)
    File.write(File.join(ITSI_DIR, "Itsi.rb"), ITSI_CONFIG)
    names.each do |name|
      port = Bench.free_port
      pid = Process.spawn(*SERVERS.fetch(name).call(port), chdir: name.start_with?("itsi") ? ITSI_DIR : ROOT,
                          out: File::NULL, err: File::NULL, pgroup: true)
      running[name] = [port, pid]
      wait_until_serving(port, pid)
    end
    yield running
  ensure
    running.each_value { |_, pid| stop(pid) }
  end

  # Stops a server started by #with_servers (or a script beside this one), in its own group.
  def stop(pid)
    Bench::Processes.stop(pid, timeout: 15)
  end


  def wait_until_serving(port, pid)
    deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 30
    loop do
      return if Net::HTTP.get_response(URI("http://127.0.0.1:#{port}/")).code == "200"
    rescue SystemCallError, EOFError, Net::ReadTimeout
      raise "server exited early" if Process.waitpid(pid, Process::WNOHANG)
      raise "server did not start on #{port}" if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
      sleep 0.1
    end
  end

  # @return [Hash] requests per second, latency p50/p99 (ms), errors
  def wrk(port, path, connections, seconds)
    output = capture("wrk", "-t1", "-c#{connections}", "-d#{seconds}s", "--latency", "--timeout", "10s", "http://127.0.0.1:#{port}#{path}")
    # Only successful responses count: a server that sheds load with fast 503s is not faster.
    requests, elapsed = output.match(/(\d+) requests in ([\d.]+)s/)&.captures
    failed = output[/Non-2xx or 3xx responses: (\d+)/, 1].to_i
    {
      rps: requests ? (requests.to_i - failed) / elapsed.to_f : 0.0,
      p50: latency(output, "50%"),
      p99: latency(output, "99%"),
      errors: output[/Socket errors: (.+)$/, 1] || (output[/Non-2xx or 3xx responses: (\d+)/, 1] ? "non-2xx: #{$1}" : nil),
      command: "wrk -t1 -c#{connections} -d#{seconds}s --latency #{path}"
    }
  end

  def latency(output, percentile)
    value, unit = output.match(/^\s+#{Regexp.escape(percentile)}\s+([\d.]+)(us|ms|s)$/)&.captures
    return nil unless value
    value.to_f * { "us" => 0.001, "ms" => 1.0, "s" => 1000.0 }.fetch(unit)
  end

  # @return [Hash] the seed's figure (ab's "Time taken for tests"), ab's slowest single request,
  #   and the wall time of 10 requests started at once by `curl --parallel`
  def ab_pg(port)
    url = "http://127.0.0.1:#{port}/pg"
    log "pool: #{Net::HTTP.get(URI("#{url}/warm"))}"
    output = capture("ab", "-c10", "-n10", "-s", "30", url)
    started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    curl = capture("curl", "-s", "--parallel", "--parallel-immediate", "--parallel-max", "10", "-w", "%{http_code} %{time_total}\\n",
                   *Array.new(10) { ["-o", File::NULL, url] }.flatten)
    curl_seconds = Process.clock_gettime(Process::CLOCK_MONOTONIC) - started
    {
      seconds: output[/Time taken for tests:\s+([\d.]+)/, 1].to_f,
      slowest: output[/^Total:\s+(?:\S+\s+){4}(\d+)/, 1].to_i / 1000.0,
      curl_seconds: curl_seconds,
      curl_ok: curl.scan(/^200 /).size,
      curl_slowest: curl.scan(/^\d+ ([\d.]+)$/).flatten.map(&:to_f).max.to_f,
      errors: [output[/Failed requests:\s+(\d+)/, 1], output[/Non-2xx responses:\s+(\d+)/, 1]].compact.map(&:to_i).sum,
      command: "ab -c10 -n10 /pg"
    }
  end

  # @return [Hash] RSS growth of the server's process tree while holding idle connections
  def idle_rss(port, pid)
    GC.start
    sleep 1
    before = tree_rss(pid)
    client = IO.popen([RbConfig.ruby, File.join(ROOT, "bench/server/idle_client.rb"), port.to_s, IDLE_CONNECTIONS.to_s], "r+")
    line = Timeout.timeout(180) { client.gets }.to_s
    sleep 2 # let lingering fibers park and the servers settle
    after = tree_rss(pid)
    held = line[/ready (\d+)/, 1].to_i
    still_serving = Net::HTTP.get_response(URI("http://127.0.0.1:#{port}/")).code == "200"
    client.close_write
    Process.wait(client.pid)
    log "idle: #{line.strip}, rss #{before / 1024} KB -> #{after / 1024} KB, serving: #{still_serving}"
    { held: held, before: before, after: after, delta_mb: (after - before) / 1024.0 / 1024.0, serving: still_serving,
      command: "bench/server/idle_client.rb PORT #{IDLE_CONNECTIONS}" }
  end

  # Resident memory of a process and all its descendants (Falcon serves from a child).
  def tree_rss(root)
    parents = {}
    Dir["/proc/[0-9]*/stat"].each do |path|
      fields = File.read(path).split(") ", 2).last.split
      parents[File.basename(File.dirname(path)).to_i] = fields[1].to_i
    rescue SystemCallError
      nil
    end
    family = [root]
    loop do
      more = parents.select { |pid, parent| family.include?(parent) && !family.include?(pid) }.keys
      break if more.empty?
      family.concat(more)
    end
    family.sum do |pid|
      File.read("/proc/#{pid}/status")[/^VmRSS:\s+(\d+)/, 1].to_i * 1024
    rescue SystemCallError
      0
    end
  end

  # Runs a command and returns its output (stderr included). In a full run (#run opens @raw)
  # the command is logged and its output kept in the raw file; a script that runs a part alone
  # (bench/server/spread.rb) prints only its own table, so neither happens there.
  def capture(*command)
    log "$ #{command.join(' ')}" if @raw
    output = IO.popen(command, err: %i[child out], &:read)
    @raw&.puts(output)
    @raw&.flush
    output
  end

  # --- report ---------------------------------------------------------------------------

  def write_report(results, limit)
    out = +"# Server benchmark: Weft vs Puma, Falcon, Iodine and Itsi\n\n"
    command = "bundle exec ruby bench/server.rb"
    command = "PATH=~/.cache/weft/rubies/ruby-#{SUFFIX[/[\d.]+\z/]}/bin:$PATH RUBY_YJIT_ENABLE=#{ENV['RUBY_YJIT_ENABLE']} #{command}" unless SUFFIX.empty?
    out << "Generated by `#{command}` (BENCH_DURATION=#{DURATION}) on #{Time.now.utc.strftime('%Y-%m-%d %H:%M UTC')}.\n\n"
    out << "## Machine and versions\n\n"
    machine.each { |key, value| out << "- #{key}: #{value}\n" }
    out << "- ulimit -n: #{limit}\n"
    out << "- load average (1, 5, 15 min) when the page was written: #{File.read('/proc/loadavg').split.first(3).join(', ')}\n\n"
    out << "#{Bench::Results.sibling_link('server')}\n\n"
    out << "Every server runs as one process with the same app (`bench/server/app.ru`, RACK_ENV=production): " \
           "`weft serve -w 0`, `puma -w 0 -t 5:5`, `falcon serve --forked -n 1`, `iodine -w 1 -t N` and " \
           "`itsi -w 1 -t N` (N Ruby threads: 1 for hello world, their fastest there, 16 for the I/O-bound rows; " \
           "Iodine's HTTP loop is C, Itsi's Rust on threads of its own). Load: `wrk -t1` " \
           "(one thread leaves the second core to the server), `ab` for the PostgreSQL test. " \
           "The machine is shared with other jobs, so figures move by up to ±25 % between runs: all servers run " \
           "at once (idle while another is measured) and each throughput figure is the better of #{ROUNDS} runs " \
           "taken in alternating server order.\n\n"
    throughput_section(out, results, "hello, 50 connections", "target: ≥ 2x Puma and ≥ 2x Falcon, ahead of Iodine and Itsi")
    throughput_section(out, results, "hello, 256 connections", "target: ≥ 2x Puma and ≥ 2x Falcon, ahead of Iodine and Itsi")
    throughput_section(out, results, "sleep 10 ms, 256 connections", "target: ≥ Falcon, ≥ 10x Puma, ahead of every peer")
    pg_section(out, results["10 x pg_sleep(1), ab -c10 -n10"])
    idle_section(out, results["10,000 idle keep-alive connections"])
    File.write(REPORT, out)
  end

  def machine
    cpu = File.read("/proc/cpuinfo")[/model name\s*:\s*(.+)/, 1] rescue "unknown"
    memory = (File.read("/proc/meminfo")[/MemTotal:\s+(\d+)/, 1].to_i / 1024.0 / 1024.0).round(1) rescue 0
    {
      "CPU" => "#{cpu} × #{Etc.nprocessors}",
      "memory" => "#{memory} GB",
      "kernel" => `uname -r`.strip,
      "ruby" => RUBY_DESCRIPTION,
      "weft" => Weft::VERSION,
      "puma" => Gem.loaded_specs["puma"]&.version.to_s,
      "falcon" => Gem.loaded_specs["falcon"]&.version.to_s,
      "async" => Gem.loaded_specs["async"]&.version.to_s,
      "iodine" => Gem.loaded_specs["iodine"]&.version.to_s,
      "itsi" => Gem.loaded_specs["itsi-server"]&.version.to_s,
      "wrk" => `wrk -v 2>&1`[/wrk \S+/],
      "ab" => `ab -V 2>&1`[/Version \S+/],
      "weft before" => BEFORE && "#{BEFORE_NAME} (#{BEFORE}, BENCH_WEFT_BEFORE)"
    }.compact
  end

  def throughput_section(out, results, title, target)
    rows = results[title]
    weft = rows.dig("weft", :rps).to_f
    out << "## #{title}\n\n#{target}. Command: `#{rows.values.first&.fetch(:command)}`\n\n"
    out << "| server | requests/s (2xx) | p50 ms | p99 ms | Weft ÷ server | errors |\n|---|---:|---:|---:|---:|---|\n"
    rows.each do |name, row|
      ratio = row[:rps].positive? ? format("%.2fx", weft / row[:rps]) : "-"
      out << "| #{name} | #{row[:rps].round} | #{fmt(row[:p50])} | #{fmt(row[:p99])} | #{ratio} | #{row[:errors] || '-'} |\n"
    end
    out << "\n" << chart(rows.transform_values { |row| row[:rps] }, "req/s") << "\n"
  end

  def pg_section(out, rows)
    out << "## 10 concurrent `select pg_sleep(1)` (the seed's test)\n\n"
    out << "target: 1.05 s or less (seed: 10.25 s blocking, 1.08 s NeverBlock). Command: `ab -c10 -n10 /pg`; " \
           "each request takes one of 10 plain `pg` connections the app opened before the measurement (a Queue as the pool).\n\n"
    out << "| server | ab time taken s | ab slowest request s | curl: slowest of 10 started at once s | curl wall s (200s) | failed | 10 requests within 1.05 s |\n" \
           "|---|---:|---:|---:|---:|---:|---|\n"
    rows.each do |name, row|
      out << "| #{name} | #{format('%.3f', row[:seconds])} | #{format('%.3f', row[:slowest])} | " \
             "#{format('%.3f', row[:curl_slowest])} | #{format('%.3f', row[:curl_seconds])} (#{row[:curl_ok]}) | #{row[:errors]} | " \
             "#{row[:curl_slowest] <= 1.05 && row[:curl_ok] == 10 ? 'yes' : 'no'} |\n"
    end
    out << "\n" << chart(rows.transform_values { |row| row[:curl_slowest] }, "s, slowest of 10 concurrent (lower is better)") << "\n"
    out << "ab 2.3 as packaged here sends its first request alone and starts the other nine only when it is " \
           "answered (visible in Weft's access log: one request ends a second before the other nine), so its " \
           "\"Time taken\" is about 2 s for any server that overlaps requests, and 3 s for Puma's 5 threads. " \
           "The slowest single request (ab's, and curl's for 10 requests started at once with `--parallel-immediate`) " \
           "shows the overlap itself; the curl wall time adds curl's own start-up.\n\n"
  end

  def idle_section(out, rows)
    out << "## #{IDLE_CONNECTIONS} idle keep-alive connections, one process\n\n"
    out << "target: at most 64 MB more RSS for Weft. Each connection made one request and then stays open; RSS of the " \
           "server's process tree before and 2 s after they are all established. \"held\" is how many the client " \
           "managed to establish (connect, one answered request) within 60 s.\n\n"
    out << "| server | held | RSS before MB | RSS after MB | growth MB | still serving |\n|---|---:|---:|---:|---:|---|\n"
    rows.each do |name, row|
      out << "| #{name} | #{row[:held]} | #{(row[:before] / 1048576.0).round(1)} | #{(row[:after] / 1048576.0).round(1)} | " \
             "#{row[:delta_mb].round(1)} | #{row[:serving] ? 'yes' : 'no'} |\n"
    end
    out << "\n" << chart(rows.transform_values { |row| row[:delta_mb] }, "MB growth (lower is better)") << "\n"
  end

  def fmt(value)
    value ? format("%.2f", value) : "-"
  end

  def chart(values, unit)
    max = values.values.max.to_f
    lines = values.map do |name, value|
      width = max.positive? ? (value / max * 40).round : 0
      format("%-12s %s %s %s", name, "█" * width, " " * (40 - width), "#{value.is_a?(Float) ? value.round(2) : value} #{unit}")
    end
    "```\n#{lines.join("\n")}\n```\n"
  end
end

ServerBench.run if $PROGRAM_NAME == __FILE__
