# frozen_string_literal: true

# One outbound call per request with plain Net::HTTP (a new connection per call, as
# Faraday's default adapter does).
require "net/http"
UPSTREAM = URI(ENV.fetch("UPSTREAM"))
run ->(_env) { [200, { "content-type" => "text/plain" }, [Net::HTTP.get(UPSTREAM)]] }
