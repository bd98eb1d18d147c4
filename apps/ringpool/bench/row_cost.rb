# frozen_string_literal: true

# PostgreSQL's CPU per stored allocation row for variants of ringpool's INSERT, to see what in a
# row costs what (bench/results/ringpool-notes.md): one backend stores `statements` statements
# of 40 rows per variant into the app's own tables (Ringpool::Schema, on a private throwaway
# cluster), and the backend's CPU is read from /proc before and after. Lockouts never overlap,
# so every row is stored; CPU, not a rate, is the figure (it hardly moves with the machine's load).
#
#   bundle exec ruby apps/ringpool/bench/row_cost.rb [statements]     (default 1000)
#
# Variants, in this order: the app's statement (Store::RECORD, jsonb_to_recordset) and the same
# rows as unnest arrays, twice each; params as json; without the (number, upper(lockout)) index;
# without the exclusion constraint; the constraint's guarantee kept instead by a conditional
# `update numbers set locked_until` before the insert; without the index and the constraint.
root = File.expand_path("../../..", __dir__)
$LOAD_PATH.unshift(File.join(root, "lib"))
require File.join(root, "test/support/postgres_cluster")
require_relative "../lib/ringpool"
require "etc"

STATEMENTS = Integer(ARGV[0] || 1000)
ROWS = 40

UNNEST = <<~SQL
  insert into allocations (ring_pool_id, number, lockout, params)
  select a.p, a.n, tstzrange(timestamptz 'epoch' + a.f * interval '1 microsecond',
                             timestamptz 'epoch' + a.u * interval '1 microsecond'), a.j
    from unnest($1::integer[], $2::text[], $3::bigint[], $4::bigint[], $5::jsonb[]) as a(p, n, f, u, j)
  on conflict do nothing
  returning number, (extract(epoch from lower(lockout)) * 1000000)::bigint
SQL

HELD = <<~SQL
  with a as (select * from jsonb_to_recordset($1::jsonb) as a(p integer, n text, f bigint, u bigint, j jsonb)),
  held as (
    update numbers x set locked_until = a.u from a
     where x.number = a.n and x.locked_until <= a.f
    returning x.number, a.p, a.f, a.u, a.j)
  insert into allocations (ring_pool_id, number, lockout, params)
  select h.p, h.number, tstzrange(timestamptz 'epoch' + h.f * interval '1 microsecond',
                                  timestamptz 'epoch' + h.u * interval '1 microsecond'), h.j from held h
  returning number, (extract(epoch from lower(lockout)) * 1000000)::bigint
SQL

cluster = Weft::Test::PostgresCluster.new.start
begin
  url = cluster.create_database("row_cost")
  db = Weft::Postgres::Pool.new(url, limit: 1)
  Weft.run { Ringpool::Schema.migrate(db) }
  db.close
  conn = PG.connect(url)
  conn.exec("insert into ring_pools (name, overflow_number, lockout_seconds) " \
            "select 'p' || g, '+1999' || lpad(g::text, 7, '0'), 1 from generate_series(1, 2000) g")
  conn.exec("insert into numbers (number, ring_pool_id) " \
            "select '+1555' || lpad(g::text, 7, '0'), 1 + (g % 2000) from generate_series(1, 100000) g")
  conn.exec("analyze")
  numbers = conn.exec("select number, ring_pool_id from numbers").values
  backend = conn.exec("select pg_backend_pid()").getvalue(0, 0)
  cpu_ms = lambda do
    fields = File.read("/proc/#{backend}/stat").split(") ").last.split
    (Integer(fields[11]) + Integer(fields[12])) * 1000.0 / Etc.sysconf(Etc::SC_CLK_TCK)
  end
  rng = Random.new(1)
  base = 1_800_000_000_000_000
  statement = 0
  # 40 distinct numbers, each held for half a second of a second of its own: never overlapping.
  batch = lambda do
    statement += 1
    from = base + statement * 1_000_000
    numbers.sample(ROWS, random: rng).map do |number, pool|
      [Integer(pool), number, from, from + 500_000,
       %({"campaign":"c#{rng.rand(500)}","keyword":"k#{rng.rand(10_000)}","source":"google","gclid":"#{rng.bytes(9).unpack1('H*')}"})]
    end
  end
  as_json = ->(rows) { "[#{rows.map { |p, n, f, u, j| %({"p":#{p},"n":"#{n}","f":#{f},"u":#{u},"j":#{j}}) }.join(',')}]" }
  array = ->(values) { "{#{values.join(',')}}" }
  json_array = ->(values) { "{#{values.map { |j| %("#{j.gsub('\\', '\\\\\\\\').gsub('"', '\"')}") }.join(',')}}" }
  record = ->(rows) { conn.exec_params(Ringpool::Store::RECORD, [as_json.(rows)]) }
  unnest = ->(rows) { c = rows.transpose; conn.exec_params(UNNEST, [array.(c[0]), array.(c[1]), array.(c[2]), array.(c[3]), json_array.(c[4])]) }
  held = ->(rows) { conn.exec_params(HELD, [as_json.(rows)]) }
  measure = lambda do |name, send|
    conn.exec("vacuum analyze allocations")
    batches = Array.new(STATEMENTS) { batch.call }
    before = cpu_ms.call
    batches.each { |rows| raise "#{name}: not every row stored" unless send.(rows).ntuples == ROWS }
    printf("%-48s %6.1f µs backend CPU per row\n", name, (cpu_ms.call - before) * 1000 / (STATEMENTS * ROWS))
  end

  2.times do
    measure.("the app's statement (jsonb_to_recordset)", record)
    measure.("the same rows as unnest arrays", unnest)
  end
  conn.exec("alter table allocations alter column params type json using params::json")
  measure.("params stored as json", record)
  conn.exec("alter table allocations alter column params type jsonb using params::jsonb")
  conn.exec("drop index allocations_latest")
  measure.("without the (number, upper(lockout)) index", record)
  conn.exec("create index allocations_latest on allocations (number, upper(lockout) desc)")
  conn.exec("alter table allocations drop constraint allocations_one_holder_per_lockout")
  measure.("without the exclusion constraint", record)
  conn.exec("alter table numbers add column locked_until bigint not null default 0")
  measure.("the constraint as a conditional update of numbers", held)
  conn.exec("drop index allocations_latest")
  measure.("without the index and the constraint", record)
  conn.close
ensure
  cluster.stop
end
