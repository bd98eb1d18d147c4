# frozen_string_literal: true

# Seed 004: a Rails 3 app whose every request called gist.github.com went from 5.46 to
# 52 req/s at concurrency 30 when Thin ran it with rack-fiber_pool and em-synchrony.
#
# Here: a Rack app making one call per request to a local upstream that answers in DELAY
# seconds (the post's 5.46 req/s, one request at a time, puts the remote call near 180 ms),
# driven by wrk with 30 connections, on the stacks of the time's successors.
module Seeds
  module Seed004
    DELAY = 0.18
    CONCURRENCY = 30
    # label => [app, command for a port]
    STACKS = {
      "Puma -t 1 + Net::HTTP (one request at a time, as Thin without fibers)" =>
        ["app_net_http.ru", ->(port, app) { %W[bundle exec puma -q -b tcp://127.0.0.1:#{port} -t 1:1 -w 0 #{app}] }],
      "Puma -t 5 + Net::HTTP" =>
        ["app_net_http.ru", ->(port, app) { %W[bundle exec puma -q -b tcp://127.0.0.1:#{port} -t 5:5 -w 0 #{app}] }],
      "Falcon + async-http" =>
        ["app_async_http.ru", ->(port, app) { %W[bundle exec falcon serve -b http://127.0.0.1:#{port} --count 1 -c #{app}] }],
      "Weft + Net::HTTP (unchanged app)" =>
        ["app_net_http.ru", ->(port, app) { %W[bundle exec exe/weft serve #{app} -b tcp://127.0.0.1:#{port} -w 0 -q] }],
      "Weft + Weft::HTTP::Client" =>
        ["app_weft.ru", ->(port, app) { %W[bundle exec exe/weft serve #{app} -b tcp://127.0.0.1:#{port} -w 0 -q] }]
    }.freeze

    module_function

    # @return [Hash{String => Hash}] wrk figures per stack
    def run(seconds)
      upstream_port = Bench.free_port
      upstream = Bench.spawn_server(["ruby", "bench/http_client/upstream.rb", upstream_port.to_s, DELAY.to_s],
                                    upstream_port, "seed004_upstream")
      env = { "UPSTREAM" => "http://127.0.0.1:#{upstream_port}", "RACK_ENV" => "production" }
      STACKS.to_h do |label, (app, command)|
        port = Bench.free_port
        pid = Bench.spawn_server(command.call(port, "bench/http_client/#{app}"), port, "seed004_#{app}", env: env)
        begin
          PostgresBench::HttpBench.wrk(port, 2, CONCURRENCY, 1) # warm-up
          result = PostgresBench::HttpBench.wrk(port, seconds, CONCURRENCY, 1)
          warn "seed 004 #{label}: #{result.inspect}"
          [label, result]
        ensure
          Bench::Processes.stop(pid)
        end
      end
    ensure
      Bench::Processes.stop(upstream) if upstream
    end

    # Adds the seed's section to `report`.
    def report(report, results)
      ceiling = CONCURRENCY / DELAY
      baseline = results.values.first[:rps]
      weft = results["Weft + Weft::HTTP::Client"][:rps]
      report.paragraph(<<~TEXT)
        ## Seed 004: a Rack app's outbound calls overlap

        **The post:** a Rails 3 app whose requests each called gist.github.com, at concurrency 30:
        **5.46 req/s** on Thin, **52 req/s** with rack-fiber_pool + em-synchrony (9.5x).

        **Here:** one call per request to a local upstream answering in #{(DELAY * 1000).round} ms
        (bench/http_client/upstream.rb; the post's 5.46 req/s one at a time puts gist's answer
        near that), wrk with #{CONCURRENCY} connections; at most #{ceiling.round} req/s are possible
        (#{CONCURRENCY} ÷ #{DELAY} s). Substitutions: a local upstream instead of gist.github.com; a
        Rack app instead of Rails 3. **Weft: #{format('%.1f', weft)} req/s, #{format('%.0f%%', weft / ceiling * 100)}
        of the ceiling; ÷ one request at a time: #{format('%.1fx', weft / baseline)}** (the post: 9.5x).
      TEXT
      report.table(["stack", "req/s", "% of ceiling", "p50 ms", "p99 ms", "errors", "Weft + client ÷ stack"],
                   results.map do |label, r|
                     [label, format("%.1f", r[:rps]), format("%.0f%%", r[:rps] / ceiling * 100), format("%.0f", r[:p50].to_f),
                      format("%.0f", r[:p99].to_f), r[:errors], format("%.2fx", weft / r[:rps])]
                   end)
      report.chart("Requests/s at concurrency #{CONCURRENCY} (higher is better)",
                   results.map { |label, r| [label.sub(/ \(.*\)/, ""), r[:rps]] }, format: "%.1f")
    end
  end
end
