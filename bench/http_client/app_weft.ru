# frozen_string_literal: true

# One outbound call per request through a shared Weft::HTTP::Client (keep-alive pool).
require "weft/http"
CLIENT = Weft::HTTP::Client.new(ENV.fetch("UPSTREAM"), proxy: nil, limit: 128)
run ->(_env) { [200, { "content-type" => "text/plain" }, [CLIENT.get("/").body]] }
