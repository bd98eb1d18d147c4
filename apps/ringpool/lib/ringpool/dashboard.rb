# frozen_string_literal: true

require_relative "metrics"

module Ringpool
  # The live dashboard: `GET /` serves a page (dashboard/index.html: plain HTML, CSS and JS, no
  # build step) that reads `GET /dashboard.json` every second. The JSON is the sum of every
  # shard's Metrics, gathered by whichever shard took the request (its fields are documented
  # in apps/ringpool/README.md):
  #
  #   current         the last CURRENT_SECONDS full seconds: rates per second and latency
  #                   percentiles
  #   series          one entry per second of the last five minutes, for the charts
  #   shards          each shard: reachable or not, pools owned, ownership, its breakers
  #   busiest_pools   the pools with the most items allocated over the last minute
  module Dashboard
    PAGE = File.expand_path("dashboard/index.html", __dir__)
    CURRENT_SECONDS = 10
    BUSIEST = 10
    PERCENTILES = { "p50_ms" => 0.5, "p90_ms" => 0.9, "p99_ms" => 0.99 }.freeze

    # @return [String] the page
    def self.page
      @page ||= File.read(PAGE).freeze
    end

    # Adds the shards' snapshots up.
    # @param snapshots [Array<Hash>] Metrics#snapshot of each reachable shard (as JSON gives it
    #   back: keys are strings)
    # @param shards [Array<Hash>] each shard's status, as listed in the document
    # @param now [Integer] the current second
    # @return [Hash] the dashboard document
    def self.summarize(snapshots, shards, now)
      seconds = Hash.new { |hash, at| hash[at] = { requests: 0, items: 0, errors: 0, overflows: Hash.new(0), latency: Hash.new(0) } }
      pools = Hash.new(0)
      snapshots.each do |snapshot|
        snapshot.fetch("seconds", []).each { |second| add(seconds[Integer(second["at"])], second) }
        snapshot.fetch("pools", {}).each { |id, count| pools[Integer(id)] += count }
      end
      # The current second is still filling up: it is left out of rates and charts.
      window = ((now - Metrics::WINDOW)...now)
      series = window.map { |at| row(at, seconds.fetch(at, nil)) }
      {
        "at" => now, "window_seconds" => Metrics::WINDOW,
        "current" => current(window.last(CURRENT_SECONDS).filter_map { |at| seconds.fetch(at, nil) }),
        "series" => series, "shards" => shards,
        "busiest_pools" => pools.max_by(BUSIEST) { |_id, count| count }.map { |id, count| { "ring_pool" => id, "allocations" => count } }
      }
    end

    def self.add(total, second)
      total[:requests] += second["requests"]
      total[:items] += second["items"]
      total[:errors] += second["errors"]
      second["overflows"].each { |reason, count| total[:overflows][reason] += count }
      second["latency"].each { |bucket, count| total[:latency][Integer(bucket)] += count }
    end

    def self.row(at, second)
      second ||= { requests: 0, items: 0, errors: 0, overflows: {}, latency: {} }
      row = { "at" => at, "requests" => second[:requests], "allocations" => second[:items], "errors" => second[:errors],
              "overflows" => Result::REASONS.to_h { |reason| [reason, second[:overflows].fetch(reason, 0)] } }
      PERCENTILES.each { |key, fraction| row[key] = Metrics.percentile(second[:latency], fraction) }
      row
    end

    def self.current(seconds)
      latency = Hash.new(0)
      seconds.each { |second| second[:latency].each { |bucket, count| latency[bucket] += count } }
      rate = ->(count) { (count.to_f / CURRENT_SECONDS).round(1) }
      current = {
        "seconds" => CURRENT_SECONDS, "requests_per_second" => rate.(seconds.sum { |s| s[:requests] }),
        "allocations_per_second" => rate.(seconds.sum { |s| s[:items] }),
        "errors_per_second" => rate.(seconds.sum { |s| s[:errors] }),
        "overflows_per_second" => Result::REASONS.to_h { |reason| [reason, rate.(seconds.sum { |s| s[:overflows].fetch(reason, 0) })] }
      }
      PERCENTILES.each { |key, fraction| current[key] = Metrics.percentile(latency, fraction) }
      current
    end
    private_class_method :add, :row, :current
  end
end
