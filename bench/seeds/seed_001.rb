# frozen_string_literal: true

# Seed 000/001, "3.5x increase in performance with a one-line change": a Rails app whose
# requests each made ~15 HTTPS calls to one host through Faraday went from 8 s to 2.3 s per
# request under load when Faraday's adapter was switched to a persistent one.
#
# Here: bench/seeds/faraday_app.ru makes 15 sequential GETs through Faraday per request, to a
# TLS upstream behind bench/seeds/latency_relay.rb (20 ms round trip), once with Faraday's
# default adapter (net_http: a TCP + TLS handshake per call) and once with `adapter :weft` —
# the one line — under Puma (threads) and under Weft, with wrk keeping CONNECTIONS requests
# in flight.
module Seeds
  module Seed001
    CALLS = 15
    ROUND_TRIP = 0.02
    CONNECTIONS = 10
    PUMA_THREADS = 10

    module_function

    # @return [Hash{[String, String] => Hash}] wrk figures per [server, adapter]
    def run(seconds)
      certs = Bench.certificates
      upstream_port = Bench.free_port
      relay_port = Bench.free_port
      upstream = Bench.spawn_server(["ruby", "bench/http_client/upstream.rb", upstream_port.to_s, "0",
                                     certs[:cert_file], certs[:key_file]], upstream_port, "seed001_upstream")
      relay = Bench.spawn_server(["bundle", "exec", "ruby", "bench/seeds/latency_relay.rb", relay_port.to_s,
                                  upstream_port.to_s, (ROUND_TRIP / 2).to_s], relay_port, "seed001_relay")
      results = {}
      %w[Puma Weft].product(%w[net_http weft]).each do |server, adapter|
        env = { "UPSTREAM" => "https://localhost:#{relay_port}", "CA_FILE" => certs[:ca_file],
                "FARADAY_ADAPTER" => adapter, "CALLS" => CALLS.to_s, "RACK_ENV" => "production" }
        port = Bench.free_port
        pid = Bench.spawn_server(command(server, port), port, "seed001_#{server}_#{adapter}", env: env)
        begin
          PostgresBench::HttpBench.wrk(port, 2, CONNECTIONS, 1) # warm-up
          results[[server, adapter]] = PostgresBench::HttpBench.wrk(port, seconds, CONNECTIONS, 1)
          warn "seed 001 #{server} #{adapter}: #{results[[server, adapter]].inspect}"
        ensure
          Bench::Processes.stop(pid)
        end
      end
      results
    ensure
      Bench::Processes.stop(relay) if relay
      Bench::Processes.stop(upstream) if upstream
    end

    def command(server, port)
      app = "bench/seeds/faraday_app.ru"
      case server
      when "Puma" then %W[bundle exec puma -q -b tcp://127.0.0.1:#{port} -t #{PUMA_THREADS}:#{PUMA_THREADS} -w 0 #{app}]
      when "Weft" then %W[bundle exec exe/weft serve #{app} -b tcp://127.0.0.1:#{port} -w 0 -q]
      end
    end

    # Adds the seed's section to `report`.
    def report(report, results)
      rows = results.map do |(server, adapter), r|
        [server, adapter == "weft" ? "`adapter :weft`" : "default (net_http)", ms(r[:avg]), ms(r[:p50]), ms(r[:p99]),
         format("%.1f", r[:rps]), r[:errors]]
      end
      ratios = %w[Puma Weft].map do |server|
        before = results[[server, "net_http"]][:avg]
        after = results[[server, "weft"]][:avg]
        "#{server}: #{format('%.2fx', before / after)}"
      end
      report.paragraph(<<~TEXT)
        ## Seed 000/001: one line of Faraday configuration

        **The post:** a Rails app making ~15 HTTPS calls to one host per request, through Faraday;
        switching Faraday's adapter from the default to a persistent one "reduced the average time
        to process a complete request (including the ~15 requests made using Faraday) under load
        from 8 seconds down to 2.3 seconds" — **3.5x**.

        **Here:** `bench/seeds/faraday_app.ru` makes #{CALLS} sequential GETs per request through
        Faraday to one TLS origin (bench/http_client/upstream.rb) behind a relay adding a
        #{(ROUND_TRIP * 1000).round} ms round trip (bench/seeds/latency_relay.rb: loopback has no
        latency, and a remote host's round trips are what a handshake per call costs). wrk keeps
        #{CONNECTIONS} requests in flight; Puma runs #{PUMA_THREADS} threads, Weft one process.
        Substitutions: a local upstream with an emulated round trip instead of a remote API; a
        Rack app instead of Rails.

        **Average request time, default adapter ÷ `adapter :weft`:** #{ratios.join(', ')} (the post: 3.5x).
      TEXT
      report.table(["server", "Faraday adapter", "avg ms", "p50 ms", "p99 ms", "req/s", "errors"], rows)
      report.chart("Average time per request, ms (lower is better)",
                   results.map { |(server, adapter), r| ["#{server} + #{adapter}", r[:avg].to_f] }, format: "%.0f ms")
    end

    def ms(value)
      value ? format("%.0f", value) : "n/a"
    end
  end
end
