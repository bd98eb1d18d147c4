# frozen_string_literal: true

# Issue #12's Rails proof, measured: the Rails app of test/postgres/apps/rails_app (7.2 on Ruby 3.1, 8.1 on 3.3; each
# request: five queries, one of them in a transaction with a uniqueness validation, one with
# `includes`, then `pg_sleep(0.05)`) on Weft, Falcon and Puma, each one process with the same
# budget of 5 PostgreSQL connections, one after the other against a private cluster:
#
#   bundle exec ruby bench/postgres/rails_bench.rb [seconds]   # writes bench/results/rails.md
#
# Load, on each server in turn: wrk, closed loop (BENCH_C connections, each sending its next
# request when the last one answered; `seconds`), then JMeter, open loop, at each of a ladder
# of fixed rates (`seconds` each; bench/postgres/rails_open_loop.rb). Each server gets its own
# database (created, migrated and seeded by the app's Rails tasks), and a thread counts that
# database's backends in pg_stat_activity while the load runs. JMeter and a JDK are Debian's
# (apt-get install jmeter jmeter-http default-jdk-headless).
#
# Environment: BENCH_SERVERS (default "weft,falcon,puma5,puma10"; pumaN is Puma with N
# threads), BENCH_C (200), BENCH_RATES ("20,40,60,70,80,90"), BENCH_DB_POOL (5), BENCH_OUT (the
# report's path), BENCH_WEFT_SETTINGS (more database.yml settings for Weft's adapter, as a query
# string on its DATABASE_URL: "lease_limit=20").

require_relative "support"
require_relative "http_bench"
require_relative "rails_open_loop"
require_relative "../support/report"
require "rbconfig"

module PostgresBench
  # The Rails app on three servers with the same connection budget.
  module RailsBench
    APP = File.join(ROOT, "test/postgres/apps/rails_app")
    SCRIPT = File.join(__dir__, "rails_post.lua")
    AUTHORS = 200
    POOL = Integer(ENV.fetch("BENCH_DB_POOL", "5"))
    FORM = { "content-type" => "application/x-www-form-urlencoded" }.freeze
    # A request sleeps 0.05 s in PostgreSQL, and a connection runs one statement at a time.
    SLEEP = 0.05
    # Seconds of the closed loop left out of its steady rate (#counting_posts).
    STEADY_AFTER = 3

    module_function

    # @return [Hash] :label, :scheme (of DATABASE_URL, which picks the adapter), :isolation
    #   (ActiveSupport's isolation level), :command (a lambda of the port)
    def server(name)
      config_ru = File.join(APP, "config.ru")
      case name
      when "weft"
        { label: "Weft", scheme: "weft-postgresql", isolation: "fiber", how: "`weft serve -w 0`, adapter weft_postgresql",
          command: ->(port) { [RbConfig.ruby, File.join(ROOT, "exe/weft"), "serve", config_ru, "-b", "tcp://127.0.0.1:#{port}", "-w", "0", "-q"] } }
      when "falcon"
        { label: "Falcon", scheme: "postgres", isolation: "fiber", how: "`falcon serve --forked -n 1`, adapter postgresql",
          command: lambda { |port|
            [RbConfig.ruby, Gem.bin_path("falcon", "falcon"), "serve", "--forked", "-n", "1", "-b", "http://127.0.0.1:#{port}", "-c", config_ru]
          } }
      when /\Apuma(\d+)\z/
        threads = Regexp.last_match(1)
        { label: "Puma -t #{threads}", scheme: "postgres", isolation: "thread", how: "`puma -w 0 -t #{threads}:#{threads}`, adapter postgresql",
          command: lambda { |port|
            [RbConfig.ruby, Gem.bin_path("puma", "puma"), "-w", "0", "-t", "#{threads}:#{threads}", "-b", "tcp://127.0.0.1:#{port}",
             "-e", "production", "-q", config_ru]
          } }
      else raise ArgumentError, "unknown server #{name} (weft, falcon, pumaN)"
      end
    end

    # The app's environment on `name`'s database.
    def environment(name)
      database = "weft_rails_#{name}"
      url = PostgresBench.database[:url].sub(%r{/[^/]*\z}, "/#{database}").sub(/\Apostgres(ql)?:/, "#{server(name)[:scheme]}:")
      url += "?#{ENV['BENCH_WEFT_SETTINGS']}" if name == "weft" && ENV["BENCH_WEFT_SETTINGS"]
      { "RAILS_ENV" => "production", "DATABASE_URL" => url, "DB_POOL" => POOL.to_s, "SEED_AUTHORS" => AUTHORS.to_s,
        "RAILS_ISOLATION_LEVEL" => server(name)[:isolation] }
    end

    # Creates, migrates and seeds `name`'s database with the app's own Rails tasks.
    def prepare(name)
      out, status = Open3.capture2e(environment(name), RbConfig.ruby, Gem.bin_path("rake", "rake"), "db:drop", "db:create",
                                    "db:migrate", "db:seed", "DISABLE_DATABASE_ENVIRONMENT_CHECK=1", chdir: APP)
      raise "rails tasks failed for #{name}:\n#{out}" unless status.success?
    end

    # One new post, as the test and wrk's script send it.
    def post(http, title)
      http.post("/authors/#{rand(1..AUTHORS)}/posts", URI.encode_www_form(title: title), FORM)
    end

    # What #counting_posts's connection calls itself, so that it is not counted as the app's.
    COUNTER = "weft-bench-counter"
    # The app's connections to a database; not autovacuum's workers, which visit it too, nor
    # #counting_posts's.
    BACKENDS = "select count(*) from pg_stat_activity where datname = $1 and backend_type = 'client backend' " \
               "and application_name <> '#{COUNTER}'"

    # Runs the block while a thread counts the client backends of `database` every 20 ms.
    # @return [Array(Object, Integer)] the block's value and the most backends seen
    def watching_backends(database)
      most = 0
      done = false
      watcher = Thread.new do
        conn = PG.connect(PostgresBench.database[:url])
        until done
          most = [most, conn.exec_params(BACKENDS, [database]).getvalue(0, 0).to_i].max
          sleep 0.02
        end
      ensure
        conn&.close
      end
      value = yield
      done = true
      watcher.join
      [value, most]
    end

    # The closed loop's rate past its start: posts inserted (one per request, in its
    # transaction) from STEADY_AFTER seconds after the load began to half a second before it
    # ends, counted in the app's database by a thread of its own. wrk's rate averages over the
    # whole run, and a server that admits all 200 connections at once spends its first second or
    # two getting their requests through their first steps before many end, where one that
    # serves a few at a time answers from the start (bench/results/rails-trace.md).
    # @return [Thread] its value: requests/s
    def counting_posts(database, seconds)
      url = PostgresBench.database[:url].sub(%r{/[^/]*\z}, "/#{database}")
      Thread.new do
        conn = PG.connect(url, application_name: COUNTER)
        count = -> { [conn.exec("select count(*) from posts").getvalue(0, 0).to_i, PostgresBench.now] }
        began = PostgresBench.now
        sleep STEADY_AFTER
        first, from = count.call
        sleep [began + seconds - 0.5 - PostgresBench.now, 0].max
        last, to = count.call
        (last - first) / (to - from)
      ensure
        conn&.close
      end
    end

    # Clock ticks per second of /proc/*/stat's CPU times (USER_HZ; 100 on Linux).
    CLOCK_TICKS = Integer(`getconf CLK_TCK`.strip, exception: false) || 100

    # CPU seconds (user + system) used so far by the processes of a process group: the server
    # under test (Falcon's forked worker included), read from /proc.
    def group_cpu(group)
      Dir.glob("/proc/[0-9]*/stat").sum do |path|
        # The command (field 2) is in parentheses and may hold spaces: split after it.
        fields = File.read(path).split(") ", 2).last.split
        fields[2].to_i == group ? fields[11].to_i + fields[12].to_i : 0 # pgrp, utime, stime
      rescue SystemCallError
        0 # the process ended meanwhile
      end.to_f / CLOCK_TICKS
    end

    # Waits until no statement has run on `database` for half a second: the requests that
    # the last load left queued are done. (A quick answer to one request is not proof of that
    # on its own: Weft's pool sends a new statement to its least busy connection, which may be
    # free while the others still work through a backlog.)
    def wait_idle(database, limit: 120)
      conn = PG.connect(PostgresBench.database[:url])
      deadline = PostgresBench.now + limit
      idle_since = PostgresBench.now
      while PostgresBench.now < deadline
        busy = conn.exec_params("#{BACKENDS} and state <> 'idle'", [database]).getvalue(0, 0).to_i.positive?
        idle_since = PostgresBench.now if busy
        return if PostgresBench.now - idle_since >= 0.5
        sleep 0.02
      end
    ensure
      conn&.close
    end

    # Measures one server: warm-up, the closed loop, then the open loop's rates.
    # @param jmeter [Bench::JMeter]
    # @return [Hash] :closed (with :backends), :open (Array<RailsOpenLoop::Step>), :timeouts
    def measure(name, seconds, connections, jmeter)
      prepare(name)
      database = "weft_rails_#{name}"
      env = environment(name)
      HttpBench.serve("rails-#{name}", server(name)[:command], env) do |port, log, group|
        url = "http://127.0.0.1:#{port}/"
        HttpBench.wrk_url(url, 3, 20, script: SCRIPT, script_args: ["warm-up", AUTHORS.to_s])
        wait_idle(database)
        HttpBench.settle(port, fast: SLEEP * 4, probe: ->(http) { post(http, "settle-#{rand(1 << 60)}") })
        cpu_before = group_cpu(group)
        steady = counting_posts(database, seconds)
        closed, backends = watching_backends(database) do
          HttpBench.wrk_url(url, seconds, connections, script: SCRIPT, script_args: ["closed", AUTHORS.to_s])
        end
        closed[:backends] = backends
        closed[:steady_rps] = steady.value
        closed[:cpu_ms] = (group_cpu(group) - cpu_before) * 1000 / (closed[:rps] * seconds)
        warn "#{name} closed loop c=#{connections}: #{closed.inspect}"
        open = RailsOpenLoop::RATES.map { |rate| open_loop_step(name, database, jmeter, port, rate, seconds) }
        { closed: closed, open: open, timeouts: File.read(log).scan(/ConnectionTimeoutError/).size }
      end
    end

    # One rate of the open loop, once the requests left over from the last load are done.
    # @return [RailsOpenLoop::Step]
    def open_loop_step(name, database, jmeter, port, rate, seconds)
      wait_idle(database)
      load_before = RailsOpenLoop.load_average
      window, backends = watching_backends(database) { RailsOpenLoop.run_rate(jmeter, name, port, rate, seconds, authors: AUTHORS) }
      warn format("%s open loop %d req/s: achieved %.1f, p50 %s p90 %s p99 %s max %s ms, %d errors, %d timeouts, %d backends",
                  name, rate, window.achieved, window.percentile(0.5), window.percentile(0.9), window.percentile(0.99), window.max,
                  window.errors(RailsOpenLoop::CREATED), window.timeouts, backends)
      RailsOpenLoop::Step.new(rate, window, backends, load_before)
    end

    def ms(value)
      value ? format("%.0f", value) : "n/a"
    end

    def tool_version(*command)
      Open3.capture2e(*command).first.lines.first.to_s.sub(/\s*Copyright.*/, "").strip
    rescue SystemCallError
      "not installed"
    end

    def report(seconds)
      HttpBench.raise_file_limit
      names = HttpBench.list("BENCH_SERVERS", "weft,falcon,puma5,puma10")
      connections = Integer(ENV.fetch("BENCH_C", "200"))
      jmeter = Bench::JMeter.new(File.join(RailsOpenLoop::TMP, "launcher"))
      uptime_before = `uptime`.strip
      results = names.to_h { |name| [name, measure(name, seconds, connections, jmeter)] }
      uptime_after = `uptime`.strip
      label = ->(name) { server(name)[:label] }
      ceiling = POOL / SLEEP

      page = Bench::Report.new("Rails #{Gem.loaded_specs['railties'].version.segments.first(2).join('.')} on Weft, " \
                               "Falcon and Puma with 5 PostgreSQL connections",
                               command: "bundle exec ruby bench/postgres/rails_bench.rb #{seconds}")
      page.paragraph(<<~TEXT)
        PostgreSQL #{PostgresBench.server_version} (private throwaway cluster, fsync off, on the same machine);
        #{tool_version('wrk', '-v')}; railties #{Gem.loaded_specs['railties']&.version}, activerecord
        #{Gem.loaded_specs['activerecord']&.version}. The server under test, PostgreSQL and the load generator share the machine's cores,
        and the machine may be running other jobs: `uptime` before the run `#{uptime_before}`, after `#{uptime_after}`.
      TEXT
      page.paragraph(<<~TEXT)
        The app is test/postgres/apps/rails_app (the one test/postgres/rails_app_test.rb runs), unchanged on every
        server: `POST /authors/:id/posts` finds the author, creates a post in a transaction (a uniqueness
        validation's query, then the insert), loads the author's five newest posts with `includes(:author)`, and runs
        `select pg_sleep(0.05)`. Every server is one process with `pool: #{POOL}` in database.yml (DB_POOL), so at most
        #{POOL} PostgreSQL connections: #{names.map { |name| "#{label.call(name)}: #{server(name)[:how]}, isolation level :#{server(name)[:isolation]}" }.join('; ')}.
        Each request sleeps #{SLEEP} s on a connection that runs one statement at a time, so no server can pass
        #{ceiling.round} requests/s with #{POOL} connections. Puma runs with as many threads as connections (5) and with twice as many:
        ActiveRecord 7.2 takes a connection for each statement (or transaction) and gives it back, so a thread that is
        not in a statement holds none.
      TEXT

      closed_rows = names.map do |name|
        r = results[name][:closed]
        [label.call(name), PostgresBench.format_number(r[:rps]), PostgresBench.format_number(r[:steady_rps]), ms(r[:p50]), ms(r[:p99]),
         r[:errors], r[:backends], results[name][:timeouts], format("%.1f", r[:cpu_ms])]
      end
      page.paragraph("## Closed loop: wrk -c#{connections}, #{seconds} s\n\n`wrk -t2 -c#{connections} -d#{seconds}s --timeout 30s " \
                     "--latency -s bench/postgres/rails_post.lua` (each request a new title for a random one of #{AUTHORS} authors), " \
                     "after a 3 s warm-up at 20 connections. Errors: non-2xx answers and socket errors. Backends: the most " \
                     "connections to the server's database in pg_stat_activity, sampled every 20 ms. Timeouts: " \
                     "ActiveRecord::ConnectionTimeoutError in the server's log over the whole run. CPU: the server's " \
                     "processes' user + system time (/proc) over the closed loop, per request answered in it. " \
                     "Requests/s past #{STEADY_AFTER} s: posts inserted (one per request) from #{STEADY_AFTER} s into the loop " \
                     "to 0.5 s before its end, counted in the app's database; wrk's requests/s averages over the whole " \
                     "loop, whose first second or two a server that admits all #{connections} connections at once spends " \
                     "getting their requests through their first steps (bench/results/rails-trace.md).")
      page.table(["server", "requests/s", "requests/s past #{STEADY_AFTER} s", "p50 ms", "p99 ms", "errors", "backends (max)",
                  "ConnectionTimeoutError", "CPU ms per request"], closed_rows)
      if results["weft"]
        [[:rps, "Weft's requests/s over each peer's"], [:steady_rps, "Past #{STEADY_AFTER} s"]].each do |key, lead|
          weft = results["weft"][:closed][key]
          ratios = (names - ["weft"]).map { |name| format("%s %.2fx", label.call(name), weft / results[name][:closed][key]) }
          page.paragraph("#{lead}: #{ratios.join(', ')}. Share of the ceiling: " \
                         "#{names.map { |name| "#{label.call(name)} #{(results[name][:closed][key] * 100 / ceiling).round}%" }.join(', ')}.")
        end
      end
      page.chart("Requests/s, closed loop (ceiling #{ceiling.round}):", names.map { |name| [label.call(name), results[name][:closed][:rps]] },
                 format: "%.1f")

      # BENCH_RATES= (empty) runs the closed loop alone: no open-loop section.
      RailsOpenLoop.report(page, names, names.to_h { |name| [name, results[name][:open]] }, seconds, label) if RailsOpenLoop::RATES.any?
      page
    end
  end
end

if $PROGRAM_NAME == __FILE__
  seconds = Integer(ARGV.fetch(0, 20))
  out = ENV.fetch("BENCH_OUT", File.join(ROOT, "bench/results/rails.md"))
  PostgresBench::RailsBench.report(seconds).write(out)
  puts File.read(out)
end
