# frozen_string_literal: true

require_relative "../support/jmeter"

module RingpoolBench
  # The ring pool's load through bench/support's open-loop JMeter plan: POST /allocations with
  # the next pregenerated JSON body, the items of each kind counted in every answer.
  class JMeter < Bench::JMeter
    # The item kinds counted in each answer, and how an item of that kind reads in the body.
    COUNTED = {
      "tracked" => '"overflow":false',
      "exhausted" => '"reason":"exhausted"',
      "shard_unavailable" => '"reason":"shard_unavailable"',
      "storage_unavailable" => '"reason":"storage_unavailable"',
      "item_error" => '"error":"'
    }.freeze
    KINDS = COUNTED.keys.freeze

    # @param dir [String] where the compiled launcher goes
    def initialize(dir)
      super(dir, counted: COUNTED)
    end

    # Sends POST /allocations at `rate` for `seconds`; see Bench::JMeter#run.
    # @param bodies [String] a file of request bodies, one JSON document a line (no tabs)
    def run(rate:, seconds:, headroom:, port:, bodies:, timeout_ms:, log_prefix:, ramp_seconds: 0, &block)
      request = Request.new(port: port, method: "POST", path: "/allocations", content_type: "application/json",
                            file: bodies, columns: %w[body])
      super(rate: rate, seconds: seconds, headroom: headroom, request: request, timeout_ms: timeout_ms, log_prefix: log_prefix,
            ramp_seconds: ramp_seconds, &block)
    end
  end
end
