# frozen_string_literal: true

# Seed 002, NeverBlock (2008): a fiber-aware PostgreSQL adapter and connection pool let one
# Thin process run its requests' statements concurrently.
#
# (a) 10 concurrent requests that each run `select pg_sleep(1)`: 10.25 s with the blocking
#     adapter, 1.08 s with NeverBlock's. Here: curl sends the 10 at once (--parallel), against
#     bench/postgres/app.ru under Weft (Weft::Postgres::Pool), Puma -t 1 (the blocking server of
#     the time: one request at a time), Puma -t 10 and Falcon (today's threaded and fibered
#     answers), 10 database connections each.
# (b) The post's table: one long statement every N requests, `select 1` otherwise, 1,000
#     requests at concurrency 10, 100 and 1000, nonblocking vs blocking. Here: hey against the
#     same four servers, 12 connections each (NeverBlock's pool was 12). At concurrency 1000,
#     1,000 requests (one burst, each connection sends one: as the post did, and a steady state
#     would take longer to reach than a short run lasts); at 10 and 100, hey runs for
#     STEADY_SECONDS instead. A fixed count there measures the unluckiest client: each of 10
#     connections sends 100 requests one after another, so the cell lasts as long as the one that
#     drew the most long statements (1,000 requests at 1:50 gave 1,860 req/s where 3 s of the
#     same load gave 4,450), and which one draws them follows the server's order of service
#     more than its speed. The long statement is pg_sleep(0.1): the post's blocking figures
#     (41 req/s at 1:5, one request at a time) cannot come from a 1 s sleep, and imply about 0.1 s.
module Seeds
  module Seed002
    # The post's table: N => [[nonblocking req/s at c = 10, 100, 1000], [blocking req/s ...]]
    POST_TABLE = {
      100 => [[456.94, 608.67, 631.82], [384.82, 524.39, 532.26]],
      50 => [[377.38, 460.74, 471.89], [266.63, 337.49, 339.01]],
      20 => [[220.44, 238.63, 266.07], [142.6, 159.7, 141.92]],
      10 => [[130.87, 139.76, 195.02], [78.68, 84.84, 81.07]],
      5 => [[70.05, 75.5, 109.34], [41.48, 42.13, 41.77]]
    }.freeze
    POST_CONCURRENCY = [10, 100, 1000].freeze
    SERVERS = %w[weft puma1 puma falcon].freeze
    SLEEPERS = 10

    module_function

    # @return [Hash] :sleep => {server => seconds for the 10 requests}, :table => hey figures
    def run
      { sleep: with_env("BENCH_LONG" => "1", "BENCH_DB_POOL" => SLEEPERS.to_s) { concurrent_sleeps },
        table: with_env("BENCH_LONG" => LONG.to_s, "BENCH_DB_POOL" => "12") { long_short_table } }
    end

    LONG = 0.1
    REQUESTS = 1000
    # Below this concurrency a cell lasts STEADY_SECONDS rather than REQUESTS requests.
    BURST_CONCURRENCY = 1000
    STEADY_SECONDS = 5
    # hey gives up on a request after this many seconds (an error in the table).
    TIMEOUT = 30

    # @return [Hash{[String, Integer, Integer] => Hash}] hey figures per [server, N, c]
    def long_short_table
      ns = ENV.fetch("SEED_002_N", "5,10,20,50,100").split(",").map { |n| Integer(n) }
      cs = ENV.fetch("SEED_002_C", "10,100,1000").split(",").map { |c| Integer(c) }
      warm_up = ->(port) { hey(port, 10, 100, ["-n", "100"]) } # code loaded, connections open
      PostgresBench::HttpBench.measure_cells(SERVERS, ns, cs, warm_up) do |port, c, n|
        hey(port, c, n, c >= BURST_CONCURRENCY ? ["-n", REQUESTS.to_s] : ["-z", "#{STEADY_SECONDS}s"])
      end
    end

    # Runs hey with `concurrency` connections and `extent` (`-n COUNT` or `-z DURATION`).
    # @return [Hash] :rps, :errors (non-200 answers and failed requests), :p50/:p99 (ms)
    def hey(port, concurrency, n, extent)
      out = IO.popen(["hey", *extent, "-c", concurrency.to_s, "-t", TIMEOUT.to_s,
                      "http://127.0.0.1:#{port}/?n=#{n}"], err: %i[child out], &:read)
      rps = out[/Requests\/sec:\s+([\d.]+)/, 1]
      raise "hey failed:\n#{out}" unless $?.success? && rps
      { rps: rps.to_f, errors: failures(out),
        p50: out[/50%+ in ([\d.]+) secs/, 1].to_f * 1000, p99: out[/99%+ in ([\d.]+) secs/, 1].to_f * 1000 }
    end

    # Answers other than 200 and requests that failed, from hey's status code and error
    # distributions ("[503]\t4 responses", "[4]\tGet ...: timeout").
    def failures(out)
      statuses = out.scan(/\[(\d+)\]\s+(\d+) responses/).sum { |code, count| code == "200" ? 0 : count.to_i }
      errors = out[/Error distribution:(.*)/m, 1].to_s.scan(/^\s*\[(\d+)\]/).sum { |(count)| count.to_i }
      statuses + errors
    end

    def with_env(values)
      saved = values.keys.to_h { |key| [key, ENV[key]] }
      ENV.update(values)
      yield
    ensure
      ENV.update(saved)
    end

    # @return [Hash{String => Float}] seconds until all 10 answers arrived, per server
    def concurrent_sleeps
      SERVERS.to_h do |server|
        PostgresBench::HttpBench.with_server(server) do |port|
          url = "http://127.0.0.1:#{port}/?n=1"
          system("curl", "-s", "-o", "/dev/null", url, exception: true) # warm-up: code loaded, a connection open
          started = Bench.now
          out = IO.popen(["curl", "-s", "--parallel", "--parallel-immediate", "--parallel-max", SLEEPERS.to_s,
                          "-w", "%{http_code}\n", *Array.new(SLEEPERS) { ["-o", "/dev/null", url] }.flatten], &:read)
          elapsed = Bench.now - started
          codes = out.split
          raise "#{server}: #{SLEEPERS} requests, answers #{codes.inspect}" unless codes == ["200"] * SLEEPERS
          warn "seed 002 #{server}: #{SLEEPERS} x pg_sleep(1) in #{elapsed.round(2)} s"
          [server, elapsed]
        end
      end
    end

    LABELS = { "weft" => "Weft", "puma1" => "Puma -t 1 (blocking)", "puma" => "Puma, a thread per connection", "falcon" => "Falcon" }.freeze

    # Adds the seed's section to `report`.
    def report(report, results)
      sleeps = results[:sleep]
      report.paragraph(<<~TEXT)
        ## Seed 002: NeverBlock, PostgreSQL statements that overlap

        **The post:** 10 concurrent requests, each running `select sleep(1)` through ActiveRecord on
        one Thin process: **10.25 s** with the blocking adapter, **1.08 s** with NeverBlock's (9.5x).

        **Here:** the same 10 requests (sent at once by `curl --parallel`) to bench/postgres/app.ru
        running `select pg_sleep(1)`, one process per server, 10 database connections each.
        Substitutions: a Rack app instead of Rails + ActiveRecord; curl instead of ab (ab sends
        its first request alone). **Weft: #{format('%.2f', sleeps['weft'])} s; blocking ÷ Weft:
        #{format('%.1fx', sleeps['puma1'] / sleeps['weft'])}** (the post: 9.5x).
      TEXT
      report.table(["server", "10 x pg_sleep(1), s", "÷ Weft"],
                   sleeps.map { |server, s| [LABELS.fetch(server), format("%.2f", s), format("%.2fx", s / sleeps["weft"])] })
      report.chart("Time for 10 concurrent pg_sleep(1) requests, s (lower is better)",
                   sleeps.map { |server, s| [LABELS.fetch(server), s] }, format: "%.2f s")
      table_section(report, results[:table])
    end

    def table_section(report, table)
      ns = table.keys.map { |key| key[1] }.uniq.sort.reverse
      cs = table.keys.map { |key| key[2] }.uniq.sort
      rows = ns.product(cs).map do |n, c|
        rps = SERVERS.to_h { |server| [server, table.fetch([server, n, c])[:rps]] }
        post = POST_TABLE[n] && POST_CONCURRENCY.index(c) && POST_TABLE[n].map { |figures| figures[POST_CONCURRENCY.index(c)] }
        errors = SERVERS.sum { |server| table.fetch([server, n, c])[:errors] }
        ["1:#{n}", c, *SERVERS.map { |server| PostgresBench.format_number(rps[server]) },
         advantage(rps["weft"], rps["puma1"]), post ? advantage(*post) : "",
         format("%.2fx", rps["weft"] / rps["puma"]), format("%.2fx", rps["weft"] / rps["falcon"]),
         errors.zero? ? "" : "#{errors} errors"]
      end
      report.paragraph(<<~TEXT)
        ### The post's table: a long statement every N requests

        **The post:** one `select sleep(1)` every N requests and `select 1` otherwise, 1,000
        requests at concurrency 10, 100 and 1000; NeverBlock's "advantage" of the nonblocking
        over the blocking adapter grew with the share of long statements, up to +162% (1:5 at
        concurrency 1000). **Here:** `pg_sleep(#{LONG})` as the long
        statement (the post's blocking figures imply about that much; a 1 s sleep could not give
        41 req/s one request at a time), 12 connections per server (NeverBlock's pool was 12),
        Puma -t 1 as the blocking server of the time. At concurrency #{BURST_CONCURRENCY} a cell is
        `hey -n #{REQUESTS} -c #{BURST_CONCURRENCY}`, a single burst (each connection sends one request,
        as in the post), and its figure moved by up to half between runs (Weft at 1:5: 303 and 460
        req/s). At 10 and 100 it is `hey -z #{STEADY_SECONDS}s -c <c>`, #{STEADY_SECONDS} s of steady load: 1,000
        requests there would time the connection that drew the most long statements (at 1:50 and
        concurrency 10, 1,000 requests gave 1,860 req/s where the same load for 3 s gave 4,450), which
        says more about the order a server serves its clients in than about its speed.
        Advantage = Weft ÷ blocking − 1, beside the post's; an "errors" note counts requests not
        answered with a 200 within #{TIMEOUT} s.
      TEXT
      report.table(["long:short", "c", *SERVERS.map { |s| "#{LABELS.fetch(s)} req/s" }, "Weft advantage",
                    "the post's advantage", "Weft ÷ Puma", "Weft ÷ Falcon", ""], rows)
    end

    def advantage(nonblocking, blocking)
      blocking.positive? ? format("%+.0f%%", (nonblocking / blocking - 1) * 100) : "n/a"
    end
  end
end
