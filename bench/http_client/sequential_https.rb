# frozen_string_literal: true

# Seed 001's case: one application request makes 15 sequential GETs to one HTTPS origin.
# Compares a new connection (TCP + TLS handshake) per call, Net::HTTP with one keep-alive
# session (per 15 calls, or kept for the whole run), Faraday's default adapter, Faraday on
# :weft, and Weft::HTTP::Client.
#
#   bundle exec ruby bench/http_client/sequential_https.rb [ROUNDS] [ORIGIN]
#
# ORIGIN "puma" (default): Puma (6 on Ruby 3.1, 7 on 3.3) with TLS, 4 threads, own process, 22-byte body.
# ORIGIN "minimal": bench/http_client/upstream.rb with TLS (a thread per connection, nothing
# else), so that the clients' own cost is a larger share of each request.
require_relative "support"
require "net/http"
require "faraday"
require "weft/http"

ROUNDS = Integer(ARGV[0] || 40)
ORIGIN = ARGV[1] || "puma"
CALLS = 15

certs = Bench.certificates
port = Bench.free_port
pid =
  case ORIGIN
  when "puma"
    bind = "ssl://127.0.0.1:#{port}?key=#{certs[:key_file]}&cert=#{certs[:cert_file]}&verify_mode=none"
    Bench.spawn_server(%W[bundle exec puma -q -b #{bind} -t 4:4 -w 0 bench/http_client/hello.ru], port, "puma_tls")
  when "minimal"
    Bench.spawn_server(["ruby", "bench/http_client/upstream.rb", port.to_s, "0", certs[:cert_file], certs[:key_file]],
                       port, "minimal_tls")
  else abort "ORIGIN must be puma or minimal"
  end

url = "https://127.0.0.1:#{port}/"
uri = URI(url)

variants = {
  "Net::HTTP, new connection per call" => lambda do
    CALLS.times do
      Net::HTTP.start(uri.host, uri.port, use_ssl: true, ca_file: certs[:ca_file]) { |http| http.get("/").body }
    end
  end,
  "Faraday (net_http adapter, default)" => (lambda do
    faraday = Faraday.new(url, ssl: { ca_file: certs[:ca_file] })
    -> { CALLS.times { faraday.get("/").body } }
  end).call,
  "Net::HTTP keep-alive (one session per 15 calls)" => lambda do
    Net::HTTP.start(uri.host, uri.port, use_ssl: true, ca_file: certs[:ca_file]) do |http|
      CALLS.times { http.get("/").body }
    end
  end,
  "Net::HTTP keep-alive (one session for all)" => (lambda do
    session = Net::HTTP.start(uri.host, uri.port, use_ssl: true, ca_file: certs[:ca_file])
    -> { CALLS.times { session.get("/").body } }
  end).call,
  "Faraday :weft" => (lambda do
    faraday = Faraday.new(url, ssl: { ca_file: certs[:ca_file] }) { |f| f.adapter :weft }
    -> { CALLS.times { faraday.get("/").body } }
  end).call,
  "Weft::HTTP::Client" => (lambda do
    client = Weft::HTTP::Client.new(url, ssl: { ca_file: certs[:ca_file] }, proxy: nil)
    -> { CALLS.times { client.get("/").body } }
  end).call
}

begin
  # Warm up every variant (JIT-free Ruby still benefits: method caches, TLS contexts).
  variants.each_value { |run| 2.times { run.call } }
  results = variants.to_h do |label, run|
    times = Array.new(ROUNDS) do
      started = Bench.now
      run.call
      Bench.now - started
    end
    times.sort!
    [label, { median: times[times.size / 2] * 1000, mean: times.sum / times.size * 1000 }]
  end
ensure
  Bench::Processes.stop(pid)
end

new_conn = results["Net::HTTP, new connection per call"][:median]
keep_alive = results["Net::HTTP keep-alive (one session for all)"][:median]
keep_alive_per_call_group = results["Net::HTTP keep-alive (one session per 15 calls)"][:median]
weft = results["Weft::HTTP::Client"][:median]
origin_name = ORIGIN == "puma" ? "Puma #{Gem.loaded_specs.fetch('puma').version.segments.first}, TLS" : "minimal threaded TLS server"
puts "## 15 sequential GETs to one HTTPS origin: #{origin_name} (#{ROUNDS} rounds, median ms per 15 GETs)"
puts
puts "| client | median ms | mean ms | speed-up vs new connection |"
puts "|---|---:|---:|---:|"
results.each do |label, r|
  puts format("| %s | %.2f | %.2f | %.1fx |", label, r[:median], r[:mean], new_conn / r[:median])
end
puts
puts "Weft vs new connection per call: #{format('%.1f', new_conn / weft)}x (target >= 8x)"
puts "Weft vs Net::HTTP keep-alive, session per 15 calls: #{format('%.2f', keep_alive_per_call_group / weft)}x (target >= 2x)"
puts "Weft vs Net::HTTP keep-alive, one session kept for the whole run: #{format('%.2f', keep_alive / weft)}x (target >= 2x)"
puts
puts "```"
puts Bench.chart(results.map { |label, r| [label, r[:median]] }, "ms (lower is better)")
puts "```"
