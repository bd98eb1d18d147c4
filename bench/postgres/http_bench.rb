# frozen_string_literal: true

# The seed's table through HTTP: a long statement (pg_sleep) every N requests, short
# (`select 1`) otherwise, N = 5, 10, 20, 50, 100, at concurrency 10, 100 and 1000, served by
# Weft (Weft::Postgres::Pool, pipelined), Puma (threads, connection_pool) and Falcon (fibers
# under async, plain `pg` + async-pool), one process each, the same number of database
# connections each. Load from wrk.
#
#   bundle exec ruby bench/postgres/http_bench.rb [seconds_per_cell]   # prints Markdown
#
# Environment: BENCH_DB_POOL (connections per server, default 32), BENCH_LONG (seconds, 0.2),
# BENCH_N ("5,10,20,50,100"), BENCH_C ("10,100,1000"), BENCH_SERVERS ("weft,puma,falcon").

require_relative "support"
require "socket"
require "tmpdir"
require "net/http"

module PostgresBench
  # The through-the-server benchmark.
  module HttpBench
    APP = File.join(__dir__, "app.ru")
    # Differences smaller than this fraction count as ties.
    TIE = 0.03

    # name => [label, BENCH_POOL, command (with PORT)]
    SERVERS = {
      "weft" => ["Weft", "weft", ->(port) { [RbConfig.ruby, File.join(ROOT, "exe/weft"), "serve", APP, "-b", "tcp://127.0.0.1:#{port}", "-w", "0", "-q"] }],
      "puma" => ["Puma", "connection_pool", lambda { |port|
        threads = ENV.fetch("BENCH_DB_POOL", "32")
        ["bundle", "exec", "puma", "-b", "tcp://127.0.0.1:#{port}", "-t", "#{threads}:#{threads}", "-w", "0", "-s", APP]
      }],
      # The blocking server of 2008 (seed 002's baseline: one Thin, one request at a time).
      "puma1" => ["Puma -t 1", "connection_pool", lambda { |port|
        ["bundle", "exec", "puma", "-b", "tcp://127.0.0.1:#{port}", "-t", "1:1", "-w", "0", "-s", APP]
      }],
      "falcon" => ["Falcon", "async_pool", lambda { |port|
        ["bundle", "exec", "falcon", "serve", "-b", "http://127.0.0.1:#{port}", "-n", "1", "--forked", "-c", APP]
      }],
    }.freeze

    module_function

    def list(name, default)
      ENV.fetch(name, default).split(",").map(&:strip).reject(&:empty?)
    end

    # All servers run at once (idle ones cost nothing) and each cell measures them back to back,
    # so a change in the machine's other load hits every column alike.
    # @return [Hash{[server, n, c] => Hash}] wrk figures per cell
    def run(seconds)
      ns = list("BENCH_N", "5,10,20,50,100").map { |v| Integer(v) }
      cs = list("BENCH_C", "10,100,1000").map { |v| Integer(v) }
      warm_up = ->(port) { wrk(port, 1, 50, 100) } # connections opened, code loaded
      measure_cells(list("BENCH_SERVERS", "weft,puma,falcon"), ns, cs, warm_up) do |port, c, n|
        wrk(port, seconds, c, n).tap { settle(port) }
      end
    end

    # Starts every server (idle ones cost nothing), warms each up, then measures each cell
    # (concurrency c, a long statement every n requests) on every server back to back.
    # @yieldparam port [Integer] @yieldparam c [Integer] @yieldparam n [Integer]
    # @return [Hash{[server, n, c] => Object}] what the block measured
    def measure_cells(servers, ns, cs, warm_up)
      raise_file_limit
      results = {}
      with_servers(servers) do |ports|
        ports.each_value(&warm_up)
        cs.each do |c|
          ns.each do |n|
            ports.each do |server, port|
              results[[server, n, c]] = yield(port, c, n)
              warn "#{server} n=#{n} c=#{c}: #{results[[server, n, c]].inspect}"
            end
          end
        end
      end
      results
    end

    # Waits until the server has worked off what the last cell left queued (wrk stops sending,
    # but requests already accepted still run their statements): a short-only request must
    # answer at once. Without it a cell after a heavy one measures the backlog (0 req/s).
    # Another app passes its own `probe` (given the Net::HTTP session) and how soon it answers
    # when nothing is queued (`fast`, seconds).
    def settle(port, limit: 120, fast: 0.05, probe: ->(http) { http.get("/?n=0") })
      deadline = PostgresBench.now + limit
      loop do
        started = PostgresBench.now
        Net::HTTP.start("127.0.0.1", port, read_timeout: limit) { |http| probe.call(http) }
        return if PostgresBench.now - started < fast || PostgresBench.now > deadline
      end
    end

    def with_servers(names, ports = {}, &block)
      return yield(ports) if names.empty?
      with_server(names.first) { |port| with_servers(names.drop(1), ports.merge(names.first => port), &block) }
    end

    def raise_file_limit
      _, hard = Process.getrlimit(:NOFILE)
      Process.setrlimit(:NOFILE, [hard, 65_536].min)
    end

    def with_server(name, &block)
      _label, pool, command = SERVERS.fetch(name)
      env = { "DATABASE_URL" => PostgresBench.database[:url], "BENCH_POOL" => pool, "RUBYLIB" => File.join(ROOT, "lib"),
              "RACK_ENV" => "production" }
      serve(name, command, env, &block)
    end

    # Starts `command` (a lambda of the port) in a process group of its own with `env`, waits
    # until it listens, yields the port and the path of its log (standard output and error),
    # then stops the whole group (Falcon's forked child too).
    # @yieldparam port [Integer] @yieldparam log [String] @yieldparam group [Integer] the
    #   process group's id
    def serve(name, command, env)
      port = TCPServer.open("127.0.0.1", 0) { |s| s.addr[1] }
      log = File.join(Dir.tmpdir, "weft-bench-#{name}.log")
      pid = Process.spawn(env, *command.call(port), out: log, err: log, pgroup: true, chdir: ROOT)
      wait_for(port, pid, log)
      yield port, log, pid
    ensure
      if pid
        Process.kill("TERM", -pid) rescue nil # rubocop:disable Style/RescueModifier
        waited = Process.clock_gettime(Process::CLOCK_MONOTONIC)
        sleep 0.1 until Process.waitpid(pid, Process::WNOHANG) || Process.clock_gettime(Process::CLOCK_MONOTONIC) - waited > 10
        Process.kill("KILL", -pid) rescue nil # rubocop:disable Style/RescueModifier
        Process.wait(pid) rescue nil # rubocop:disable Style/RescueModifier
      end
    end

    def wait_for(port, pid, log)
      deadline = PostgresBench.now + 30
      loop do
        TCPSocket.new("127.0.0.1", port).close
        return
      rescue SystemCallError
        raise "server exited early:\n#{File.read(log)}" if Process.waitpid(pid, Process::WNOHANG)
        raise "server did not listen within 30s:\n#{File.read(log)}" if PostgresBench.now > deadline
        sleep 0.1
      end
    end

    # Runs wrk and returns :rps, :errors (non-2xx + socket errors), :avg/:p50/:p99 latency (ms).
    def wrk(port, seconds, connections, n)
      wrk_url("http://127.0.0.1:#{port}/?n=#{n}", seconds, connections)
    end

    # wrk against `url`, optionally with a Lua `script` (given `script_args` after `--`).
    # @return [Hash] :rps, :errors (non-2xx + socket errors), :avg/:p50/:p99 latency (ms)
    def wrk_url(url, seconds, connections, script: nil, script_args: [])
      threads = [2, connections].min
      command = ["wrk", "-t#{threads}", "-c#{connections}", "-d#{seconds}s", "--timeout", "30s", "--latency"]
      command += ["-s", script] if script
      command << url
      command += ["--", *script_args] unless script_args.empty?
      out, status = Open3.capture2e(*command)
      raise "wrk failed: #{out}" unless status.success?
      warn "wrk reported no rate:\n#{out}" unless out.match?(/Requests\/sec/)
      errors = out[/Non-2xx or 3xx responses: (\d+)/, 1].to_i
      out[/Socket errors: (.+)/, 1].to_s.scan(/\d+/).each { |count| errors += count.to_i }
      { rps: out[/Requests\/sec:\s+([\d.]+)/, 1].to_f, errors: errors,
        avg: latency_ms(out[/^\s+Latency\s+(\S+)/, 1]),
        p50: latency_ms(out[/\s50%\s+(\S+)/, 1]), p99: latency_ms(out[/\s99%\s+(\S+)/, 1]) }
    end

    def latency_ms(text)
      return nil unless text
      value = text.to_f
      case text
      when /us\z/ then value / 1000
      when /ms\z/ then value
      when /s\z/ then value * 1000
      else value
      end
    end

    def report(seconds)
      results = run(seconds)
      servers = results.keys.map(&:first).uniq
      ns = results.keys.map { |k| k[1] }.uniq
      cs = results.keys.map { |k| k[2] }.uniq
      labels = servers.to_h { |s| [s, SERVERS.fetch(s).first] }
      header = "| N | c | #{servers.map { |s| "#{labels[s]} req/s" }.join(' | ')} | " \
               "#{(servers - ['weft']).map { |s| "Weft / #{labels[s]}" }.join(' | ')} |"
      lines = [header, "|#{'---|' * (2 + servers.size + servers.size - 1)}"]
      wins = 0
      ties = 0
      cells = 0
      cs.each do |c|
        ns.each do |n|
          figures = servers.map do |s|
            r = results[[s, n, c]]
            "#{PostgresBench.format_number(r[:rps])}#{" (#{r[:errors]} errors)" if r[:errors].positive?}"
          end
          ratios = (servers - ["weft"]).map do |s|
            weft = results[["weft", n, c]][:rps]
            other = results[[s, n, c]][:rps]
            cells += 1
            wins += 1 if weft > other * (1 + TIE)
            ties += 1 if (weft - other).abs <= other * TIE
            other.positive? ? format("%.2fx", weft / other) : "n/a"
          end
          lines << "| #{n} | #{c} | #{figures.join(' | ')} | #{ratios.join(' | ')} |"
        end
      end
      charts = cs.map do |c|
        rows = ns.flat_map { |n| servers.map { |s| ["N=#{n} #{labels[s]}", results[[s, n, c]][:rps]] } }
        "Concurrency #{c} (requests/s):\n\n```\n#{PostgresBench.bars(rows)}\n```"
      end
      latency = cs.map do |c|
        "| #{c} | " + servers.map { |s| r = results[[s, ns.min, c]]; "#{r[:p50]&.round(1)} / #{r[:p99]&.round(1)}" }.join(" | ") + " |"
      end
      <<~MARKDOWN
        ## Through the HTTP server: a long statement every N requests

        Command: `bundle exec ruby bench/postgres/http_bench.rb #{seconds}` — wrk `-t2 -c<c> -d#{seconds}s
        --timeout 30s` against each server in turn, cell by cell (one process each, #{ENV.fetch('BENCH_DB_POOL', '32')} database
        connections each, Puma with as many threads), long statement `pg_sleep(#{ENV.fetch('BENCH_LONG', '0.2')})`.
        Weft: `weft serve -w 0`, Weft::Postgres::Pool (pipelining on). Puma: `puma -w 0 -t 32:32`,
        connection_pool + `pg`. Falcon: `falcon serve -n 1 --forked`, async-pool + `pg` (fiber-concurrent
        under async's scheduler), held to 32 connections by an Async::Semaphore. Same app
        (bench/postgres/app.ru) for all.
        Weft ahead by more than #{(TIE * 100).round}% in #{wins} of #{cells} comparisons, within
        #{(TIE * 100).round}% (a tie: run-to-run noise on this shared machine is about that) in #{ties}.

        #{lines.join("\n")}

        Latency p50 / p99 in ms at N=#{ns.min}:

        | c | #{servers.map { |s| labels[s] }.join(' | ')} |
        |---|#{'---|' * servers.size}
        #{latency.join("\n")}

        #{charts.join("\n\n")}
      MARKDOWN
    end
  end
end

if $PROGRAM_NAME == __FILE__
  seconds = Integer(ARGV.fetch(0, 5))
  puts PostgresBench::HttpBench.report(seconds)
end
