# frozen_string_literal: true

# The PostgreSQL benchmarks in one command; writes bench/results/postgres.md.
#
#   bundle exec ruby bench/postgres/run.rb [seconds_per_cell]
#
# Runs bench/postgres/pool_bench.rb (select 1, 100 fibers over 4 connections: pipelined vs not
# vs pgbench) and bench/postgres/http_bench.rb (a long statement every N requests through
# Weft, Puma and Falcon) against a private PostgreSQL cluster (or DATABASE_URL).

require_relative "support"
require_relative "pool_bench"
require_relative "http_bench"
require_relative "../support/results"

seconds = Integer(ARGV.fetch(0, 5))
database = PostgresBench.database
versions = %w[pg puma falcon async connection_pool].map do |name|
  spec = Gem.loaded_specs[name] || Gem::Specification.find_by_name(name)
  "#{name} #{spec.version}"
rescue Gem::MissingSpecError
  nil
end.compact
pgbench = `pgbench --version`.strip
wrk = `wrk --version 2>&1`.lines.first.to_s.strip

pool_section = PostgresBench::PoolBench.report(seconds)
http_section = PostgresBench::HttpBench.report(seconds)

markdown = <<~MARKDOWN
  # PostgreSQL benchmarks

  Produced by `bundle exec ruby bench/postgres/run.rb #{seconds}` on #{Time.now.utc.strftime('%Y-%m-%d %H:%M UTC')}.

  - Machine: #{PostgresBench.machine}
  - PostgreSQL #{PostgresBench.server_version} (#{database[:cluster] ? 'private throwaway cluster, fsync off, on the same machine' : 'DATABASE_URL'}),
    libpq #{PG.library_version}, #{pgbench}, #{wrk}
  - Weft #{Weft::VERSION}, #{versions.join(', ')}
  - Everything (server under test, PostgreSQL, the load generator) shares the machine's cores.

  #{Bench::Results.sibling_link("postgres")}

  #{pool_section}
  #{http_section}
  ## Reading the results

  - **`select 1`, pipelined vs not.** Not pipelined, at most 4 statements are in flight (one per
    connection), so throughput is 4 / round trip. Pipelined, ~25 per connection are in flight and
    the limit becomes the Ruby process's CPU: about 12 µs per statement, of which `pg`, libpq and
    their malloc are about a fifth and Weft's own Ruby (pool, pipeline, condition variables,
    reactor) with the GC about three fifths (see "Where the time goes" in
    bench/results/postgres.md, measured with bench/postgres/pool_profile.rb). PostgreSQL shares
    the two cores. The ratio to the not-pipelined pool grows with the round trip (a database on
    another host), which this machine cannot show without adding latency to loopback for every
    process on it.
  - **Through the server.** With the same 32 database connections for every server, a cell is
    bounded by the long statements whenever they occupy every connection: at most
    32 / 0.2 s × N requests/s (800 at N=5, 1,600 at N=10, 3,200 at N=20), and at concurrency 10 by
    10 / (0.2 s / N). All three servers reach those bounds, so those cells are ties by
    construction. Where the short statements dominate (N = 50, 100 at concurrency 100 and 1000),
    Weft's per-request cost and its pool decide. The pool runs a statement alone on a free
    connection while there is one and pipelines only when connections run short; pipelining
    everything had cost up to 25% in those cells (a statement queued behind a long one on a
    pipelined connection waits for it, and at low depth the pipeline's bookkeeping costs more
    Ruby work than a plain round trip).
  - The machine is shared with other engineers' benchmarks; cells move by 5-50% between runs
    when another load runs at the same time. Compare columns within one run.
MARKDOWN

path = Bench::Results.path("postgres")
File.write(path, markdown)
puts markdown
warn "wrote #{path}"
