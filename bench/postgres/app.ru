# frozen_string_literal: true

# The benchmark app, the same for every server: each request runs one PostgreSQL statement,
# `select pg_sleep(LONG)` on every Nth request (N from the query string `?n=N`, counted per
# process) and `select 1` otherwise.
#
# BENCH_POOL picks how the app reaches PostgreSQL:
#   weft            - Weft::Postgres::Pool, pipelining on (for `weft serve`)
#   connection_pool - the connection_pool gem around plain PG connections (for Puma's threads)
#   async_pool      - async-pool's Async::Pool::Controller around plain PG connections (for
#                     Falcon: `pg` is fiber-concurrent under async's scheduler)
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
    pool = Weft::Postgres::Pool.new(url, limit: size, acquire_timeout: 60, pipelining: ENV["BENCH_PIPELINING"] != "0")
    ->(sql) { pool.query(sql) }
  when "connection_pool"
    require "connection_pool"
    pool = ConnectionPool.new(size: size, timeout: 60) { PG.connect(url) }
    ->(sql) { pool.with { |conn| conn.exec(sql) } }
  when "async_pool"
    require "async/pool/controller"
    require "async/pool/resource"
    # A PG::Connection as an async-pool resource (one statement at a time).
    resource = Class.new(Async::Pool::Resource) do
      attr_reader :connection

      def initialize(url)
        super()
        @connection = PG.connect(url)
      end

      def close
        @connection.close
        super
      end
    end
    require "async/semaphore"
    pool = Async::Pool::Controller.wrap(limit: size) { resource.new(url) }
    # async-pool's limit was seen to overshoot (38 connections for limit 32) while resources
    # are being created; the semaphore keeps Falcon to the same connection budget as the others.
    budget = Async::Semaphore.new(size)
    ->(sql) { budget.acquire { pool.acquire { |r| r.connection.exec(sql) } } }
  else
    raise ArgumentError, "BENCH_POOL must be weft, connection_pool or async_pool"
  end

counter = 0
headers = { "content-type" => "text/plain" }.freeze

run lambda { |env|
  every = env["QUERY_STRING"].to_s[/n=(\d+)/, 1].to_i
  counter += 1
  run_sql.call(every.positive? && (counter % every).zero? ? long_sql : "select 1")
  [200, headers.dup, ["ok\n"]]
}
