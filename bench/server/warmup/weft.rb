# frozen_string_literal: true

# The cluster of bench/server/warmup.rb. WARMUP_BENCH_WARM=1: a warm-up of the batch endpoint
# in the master (Weft::Server::Warmup); =health: of GET /health alone (a plain-text answer: about
# Weft's own request path and nothing of the app's).
rackup File.expand_path("app.ru", __dir__)
preload true
after_worker_boot { WarmupBench.boot }
case ENV["WARMUP_BENCH_WARM"]
when "health"
  warmup { |warm| warm.get("/health") }
when "1"
  warmup do |warm|
    body = JSON.generate({ "allocations" => Array.new(40) { |i| { "ring_pool" => i, "params" => { "i" => i } } } })
    answer = warm.post("/allocations", body: body, headers: { "content-type" => "application/json" })
    raise "warm-up answered #{answer.status}" unless answer.status == 200
  end
end
