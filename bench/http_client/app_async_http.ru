# frozen_string_literal: true

# One outbound call per request through a shared Async::HTTP client (keep-alive pool).
require "async/http/client"
require "async/http/endpoint"
ENDPOINT = Async::HTTP::Endpoint.parse(ENV.fetch("UPSTREAM"))
run lambda { |_env|
  # A client per reactor thread (Falcon runs each instance's requests in one reactor).
  client = (Thread.current[:upstream_client] ||= Async::HTTP::Client.new(ENDPOINT, limit: 128))
  response = client.get("/")
  [200, { "content-type" => "text/plain" }, [response.read]]
}
