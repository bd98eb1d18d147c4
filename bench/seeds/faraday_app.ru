# frozen_string_literal: true

# Seed 001's app: every request makes CALLS sequential GETs through Faraday to one HTTPS
# origin (UPSTREAM, trusted through CA_FILE). FARADAY_ADAPTER picks the adapter, the one line
# the post changed: net_http (Faraday's default: a new TCP + TLS connection per call) or weft
# (Weft::HTTP::Client: persistent, pooled connections).
require "faraday"

adapter = ENV.fetch("FARADAY_ADAPTER", "net_http").to_sym
require "weft/http/faraday" if adapter == :weft
calls = Integer(ENV.fetch("CALLS", "12"))
upstream = Faraday.new(url: ENV.fetch("UPSTREAM"), ssl: { ca_file: ENV.fetch("CA_FILE") }) do |faraday|
  faraday.adapter adapter
end

run lambda { |_env|
  bytes = 0
  calls.times { bytes += upstream.get("/").body.bytesize }
  [200, { "content-type" => "text/plain" }, ["#{calls} calls, #{bytes} bytes\n"]]
}
