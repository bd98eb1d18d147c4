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

  #{pool_section}
  #{http_section}
MARKDOWN

path = File.join(ROOT, "bench/results/postgres.md")
File.write(path, markdown)
puts markdown
warn "wrote #{path}"
