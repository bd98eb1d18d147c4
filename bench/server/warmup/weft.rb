# frozen_string_literal: true

# The cluster of bench/server/warmup.rb. WARMUP_BENCH_WARM=1: a warm-up of the batch endpoint
# in the master (Weft::Server::Warmup).
rackup File.expand_path("app.ru", __dir__)
preload true
after_worker_boot { WarmupBench.boot }
if ENV["WARMUP_BENCH_WARM"] == "1"
  warmup do |warm|
    body = JSON.generate({ "allocations" => Array.new(40) { |i| { "ring_pool" => i, "params" => { "i" => i } } } })
    answer = warm.post("/allocations", body: body, headers: { "content-type" => "application/json" })
    raise "warm-up answered #{answer.status}" unless answer.status == 200
  end
end
