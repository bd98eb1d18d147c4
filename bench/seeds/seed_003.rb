# frozen_string_literal: true

# Seed 003, the ring pool API: 40 allocations per request, p90 under 200 ms, 2,000 req/s
# under JMeter on a cluster of cloud machines. Its experiment is the ringpool load test, which
# needs minutes of its own; this section reports its latest result page.
module Seeds
  module Seed003
    RESULTS = File.join(Bench::ROOT, "bench/results/ringpool.md")
    COMMAND = "bench/ringpool/run"

    module_function

    # Adds the seed's section to `report`.
    def report(report)
      found = File.exist?(RESULTS) && File.exist?(File.join(Bench::ROOT, COMMAND))
      report.paragraph(<<~TEXT)
        ## Seed 003: the ring pool service

        **The talk:** the ROL API, rebuilt on EventMachine and fibers with shards per core, held
        **p90 < 200 ms with 40 allocations per request up to 2,000 req/s** (median 93 ms at
        400 req/s, 102 ms at 1,700 req/s) under JMeter, on a cluster of cloud machines.

        **Here:** #{found ? "the ringpool load test (`#{COMMAND}`) measures the same service, built on Weft (apps/ringpool), on this one machine; its latest results are in [ringpool.md](ringpool.md), not rerun by this command because it takes minutes of its own." : "not measured yet: the ringpool load test (`#{COMMAND}`) does not exist in this tree."}
      TEXT
    end
  end
end
