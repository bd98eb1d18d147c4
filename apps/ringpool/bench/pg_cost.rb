# frozen_string_literal: true

# PostgreSQL's CPU per stored allocation, through the app's own storage path: a private
# throwaway cluster (fsync off, as the tests and bench/ringpool/run use it) migrated with
# Ringpool::Schema, pools created with Store#create_pool, then `processes` forked shards, each
# running a Ringpool::Allocator over its share of the pools inside a Weft reactor, with
# `concurrency` requests in flight at once, each allocating `items` numbers from random pools
# (1 s lockouts), for `seconds`. The figure that matters is PostgreSQL's CPU time (its
# postmaster and every backend, from /proc) divided by the allocations stored: unlike a rate it
# hardly moves when other jobs share the machine. Also printed: the shards' own CPU per
# allocation, rows per transaction, and the rate reached (which does move with the machine).
#
#   bundle exec ruby apps/ringpool/bench/pg_cost.rb [seconds] [processes] [concurrency] [items]
#
# Defaults: 20 s, 2 processes, 16 requests in flight each, 20 items (a 40-item request split
# over 2 shards). Run it on two checkouts to compare their storage (see
# bench/results/ringpool-notes.md).
root = File.expand_path("../../..", __dir__)
$LOAD_PATH.unshift(File.join(root, "lib"))
require File.join(root, "test/support/postgres_cluster")
require File.join(root, "bench/ringpool/procfs")
require_relative "../lib/ringpool"

seconds = Float(ARGV[0] || 20)
processes = Integer(ARGV[1] || 2)
concurrency = Integer(ARGV[2] || 16)
items_per_request = Integer(ARGV[3] || 20)
POOLS = 1000
NUMBERS_PER_POOL = 100

# One shard's part: allocates from its pools until `stop_at`, then reports what it stored.
def allocate_until(stop_at, database_url, pool_ids, concurrency, items_per_request)
  counts = Hash.new(0)
  Weft.run do
    db = Weft::Postgres::Pool.new(database_url, limit: 8)
    store = Ringpool::Store.new(db)
    allocator = Ringpool::Allocator.new(store)
    pools = store.pools(ids: pool_ids)
    numbers = store.numbers_with_lockouts(pool_ids)
    pools.each { |pool| allocator.adopt(pool, numbers.fetch(pool.id)) }
    Array.new(concurrency) do
      Weft.spawn do
        while Weft::Timers.now < stop_at
          items = Array.new(items_per_request) { Ringpool::Allocator::Item.new(pools.sample, '{"campaign":"bench","visitor":"123456789"}') }
          allocator.allocate(items).each { |result| counts[result.kind == :overflow ? result.reason : result.kind.to_s] += 1 }
        end
      end
    end.each(&:wait)
    db.close
  end
  counts.merge("cpu" => Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID))
end

cluster = Weft::Test::PostgresCluster.new.start
begin
  database_url = cluster.create_database("pg_cost")
  postmaster = Integer(File.foreach(File.join(cluster.data_dir, "postmaster.pid")).first)
  ids = Weft.run do
    db = Weft::Postgres::Pool.new(database_url, limit: 4)
    Ringpool::Schema.migrate(db)
    store = Ringpool::Store.new(db)
    Array.new(POOLS) do |p|
      numbers = Array.new(NUMBERS_PER_POOL) { |n| format("+1%04d%05d", 2000 + p, n) }
      store.create_pool(name: "p#{p}", numbers: numbers, overflow_number: format("+1%04d99999", 2000 + p), lockout_seconds: 1).id
    end.tap { db.close }
  end
  commits = -> { Integer(cluster.psql("select xact_commit from pg_stat_database where datname = 'pg_cost'").first["xact_commit"]) }

  started_commits = commits.call
  started_pg = RingpoolBench::Procfs.tree_cpu(RingpoolBench::Procfs.processes, postmaster)
  started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
  stop_at = Weft::Timers.now + seconds
  readers = ids.each_slice((ids.size.to_f / processes).ceil).map do |share|
    reader, writer = IO.pipe
    fork do
      reader.close
      writer.write(Marshal.dump(allocate_until(stop_at, database_url, share, concurrency, items_per_request)))
      writer.close
      exit!(0)
    end
    writer.close
    reader
  end
  results = readers.map { |reader| Marshal.load(reader.read) } # rubocop:disable Security/MarshalLoad (our own children)
  Process.waitall
  elapsed = Process.clock_gettime(Process::CLOCK_MONOTONIC) - started
  pg_cpu = RingpoolBench::Procfs.tree_cpu(RingpoolBench::Procfs.processes, postmaster) - started_pg
  transactions = commits.call - started_commits
  kinds = results.each_with_object(Hash.new(0)) { |counts, sum| counts.each { |kind, n| sum[kind] += n unless kind == "cpu" } }
  stored = kinds["tracked"]
  shard_cpu = results.sum { |counts| counts["cpu"] }
  rows = Integer(cluster.psql("select count(*) from allocations", dbname: "pg_cost").first["count"])

  puts "#{processes} shards x #{concurrency} requests in flight x #{items_per_request} items, #{elapsed.round(1)} s " \
       "(load average #{File.read('/proc/loadavg').split.first(3).join(' ')})"
  puts "answers: #{kinds.sort.map { |kind, n| "#{kind} #{n}" }.join(', ')}; rows in the table: #{rows}"
  puts format("=> %.0f allocations/s; PostgreSQL %.1f µs CPU per allocation (%.2f s in all), shards %.1f µs; " \
              "%.1f rows per transaction (%d transactions)",
              stored / elapsed, pg_cpu * 1e6 / stored, pg_cpu, shard_cpu * 1e6 / stored, stored.to_f / transactions, transactions)
ensure
  cluster&.destroy
end
