# frozen_string_literal: true

# The benchmark app, the same for every server: each request runs one PostgreSQL statement,
# `select pg_sleep(LONG)` on every Nth request (N from the query string `?n=N`, counted per
# process) and `select 1` otherwise.
#
# BENCH_POOL picks how the app reaches PostgreSQL:
#   weft            - Weft::Postgres::Pool, pipelining on (for `weft serve`)
#   connection_pool - the connection_pool gem around plain PG connections (for Puma's threads,
#                     and for Falcon, where `pg` is fiber-concurrent under async's scheduler and
#                     connection_pool keys checkouts per fiber)
# BENCH_DB_POOL connections at most (default 32), BENCH_LONG seconds (default 0.2),
# DATABASE_URL the server.
require "pg"

url = ENV.fetch("DATABASE_URL")
size = Integer(ENV.fetch("BENCH_DB_POOL", 32))
long_sql = "select pg_sleep(#{Float(ENV.fetch('BENCH_LONG', 0.2))})"

run_sql =
  case ENV.fetch("BENCH_POOL")
  when "weft"
    require "weft/postgres"
    pool = Weft::Postgres::Pool.new(url, size: size, checkout_timeout: 60)
    ->(sql) { pool.query(sql) }
  when "connection_pool"
    require "connection_pool"
    pool = ConnectionPool.new(size: size, timeout: 60) { PG.connect(url) }
    ->(sql) { pool.with { |conn| conn.exec(sql) } }
  else
    raise ArgumentError, "BENCH_POOL must be weft or connection_pool"
  end

counter = 0
headers = { "content-type" => "text/plain" }.freeze

run lambda { |env|
  every = env["QUERY_STRING"].to_s[/n=(\d+)/, 1].to_i
  counter += 1
  run_sql.call(every.positive? && (counter % every).zero? ? long_sql : "select 1")
  [200, headers.dup, ["ok\n"]]
}
