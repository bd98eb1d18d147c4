# frozen_string_literal: true

# The app of bench/server/warmup.rb: a batch endpoint shaped like ringpool's POST /allocations
# (a JSON body of 40 items parsed, each checked and answered, the answer generated as JSON), and
# GET /__worker, the worker's CPU and YJIT counters since it booted (WarmupBench.boot).
require "json"

module WarmupBench
  class << self
    # Called in each worker before it serves: what it has spent so far is the baseline.
    def boot
      @booted = [cpu, *yjit]
    end

    # @return [Hash] CPU ms, compiled iseqs and compile ms since #boot
    def since_boot
      now = [cpu, *yjit]
      { "pid" => Process.pid, "cpu_ms" => ((now[0] - @booted[0]) * 1000).round(1),
        "iseqs" => now[1] && now[1] - @booted[1], "compile_ms" => now[2] && ((now[2] - @booted[2]) / 1e6).round(1),
        "iseqs_total" => now[1] }
    end

    private

    def cpu
      Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID)
    end

    def yjit
      return [nil, nil] unless defined?(RubyVM::YJIT) && RubyVM::YJIT.enabled?
      RubyVM::YJIT.runtime_stats.values_at(:compiled_iseq_count, :compile_time_ns)
    end
  end

  # Answers a batch: each item's pool and params checked, a number picked, the lockout's end.
  class Batch
    NUMBERS = Array.new(100) { |i| format("+1555%07d", i) }.freeze

    def call(env)
      return [200, { "content-type" => "application/json" }, [JSON.generate(WarmupBench.since_boot)]] if env["PATH_INFO"] == "/__worker"
      return [200, { "content-type" => "text/plain" }, ["ok"]] if env["PATH_INFO"] == "/health"
      batch = JSON.parse(env["rack.input"].read)
      items = batch.fetch("allocations")
      return [422, { "content-type" => "application/json" }, ['{"error":"1 to 1000 items"}']] unless (1..1000).cover?(items.size)
      now = Process.clock_gettime(Process::CLOCK_REALTIME)
      answers = items.map.with_index { |item, index| answer(item, index, now) }
      [200, { "content-type" => "application/json" }, [JSON.generate({ "allocations" => answers })]]
    end

    private

    def answer(item, index, now)
      pool = item["ring_pool"]
      params = item["params"]
      return { "ring_pool" => pool, "error" => "invalid params" } unless pool.is_a?(Integer) && params.is_a?(Hash)
      number = NUMBERS[(pool * 7 + index) % NUMBERS.size]
      { "ring_pool" => pool, "number" => number, "overflow" => false,
        "lockout_until" => Time.at(now + 2).utc.strftime("%Y-%m-%dT%H:%M:%S.%6NZ") }
    end
  end
end

run WarmupBench::Batch.new
