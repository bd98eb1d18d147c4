# frozen_string_literal: true

module Ringpool
  # The tables, as numbered migrations. Every shard runs Schema.migrate when it starts; it is
  # idempotent and safe to run from several processes at once (they take turns on an advisory
  # lock, and each migration is applied once, in its own transaction).
  #
  #   ring_pools        a pool: its overflow number and lockout period
  #   numbers           the tracked numbers, each in exactly one pool
  #   allocations       who got which number, for which lockout period, with which params.
  #                     The exclusion constraint (btree_gist, on the number read as a bigint
  #                     and the lockout range) is the last line of defence: PostgreSQL itself
  #                     refuses a second allocation of a number whose lockout overlaps an
  #                     existing one, whatever the shards believe. Migration 1 made the first
  #                     tables; 2 made the allocations cheaper to store (see there).
  #   overflow_counts   overflow numbers handed out, per pool and reason
  #   ringpool_shards   live shards: the URL peers reach them at, the backend pid of the
  #                     session holding their ownership locks (see Ownership) and, since
  #                     migration 3, which process serves the URL
  module Schema
    # The advisory lock key (two int4s) that serializes migrations across processes.
    LOCK = [0x52494E47, 0].freeze

    MIGRATIONS = {
      1 => <<~SQL,
        create extension if not exists btree_gist;

        create table ring_pools (
          id integer primary key generated always as identity,
          name text not null default '',
          overflow_number text not null check (overflow_number ~ '^\\+[1-9][0-9]{1,14}$'),
          lockout_seconds integer not null check (lockout_seconds between 1 and 31536000),
          created_at timestamptz not null default now()
        );

        create table numbers (
          number text primary key check (number ~ '^\\+[1-9][0-9]{1,14}$'),
          ring_pool_id integer not null references ring_pools (id),
          unique (number, ring_pool_id)
        );
        create index numbers_ring_pool on numbers (ring_pool_id);

        create table allocations (
          id bigint primary key generated always as identity,
          ring_pool_id integer not null,
          number text not null,
          lockout tstzrange not null
            check (not isempty(lockout) and not lower_inf(lockout) and not upper_inf(lockout)),
          params jsonb not null,
          foreign key (number, ring_pool_id) references numbers (number, ring_pool_id),
          constraint allocations_one_holder_per_lockout exclude using gist (number with =, lockout with &&)
        );
        create index allocations_latest on allocations (number, upper(lockout) desc);
        create index allocations_ring_pool on allocations (ring_pool_id);

        create table overflow_counts (
          ring_pool_id integer not null references ring_pools (id),
          reason text not null,
          count bigint not null,
          primary key (ring_pool_id, reason)
        );

        create table ringpool_shards (
          url text primary key,
          pid integer not null,
          heartbeat_at timestamptz not null default now()
        );
      SQL
      # Cheaper rows (issue #10). PostgreSQL spent ~100 µs of CPU per allocation, ~90 of them in
      # the exclusion constraint's GiST index, because btree_gist handles text keys slowly; the
      # same constraint on the number read as a bigint (an E.164 number is "+" and at most 15
      # digits) costs about a quarter of that. It is no weaker: one number always gives one key.
      # Also gone, as the shards never needed them: the foreign key into numbers (a lookup and a
      # row lock per allocation; a shard only allocates its pools' own numbers), the index on
      # ring_pool_id (a pool's count is found through its numbers) and the id column with its
      # primary key (nothing refers to an allocation by id); with the foreign key goes the
      # unique (number, ring_pool_id) it needed.
      # On a big table this rebuilds the constraint's index with the table locked: minutes for
      # tens of millions of rows.
      2 => <<~SQL,
        alter table allocations drop constraint allocations_one_holder_per_lockout;
        alter table allocations add constraint allocations_one_holder_per_lockout
          exclude using gist ((substr(number, 2)::bigint) with =, lockout with &&);
        alter table allocations drop constraint allocations_number_ring_pool_id_fkey;
        drop index allocations_ring_pool;
        alter table allocations drop column id;
        alter table numbers drop constraint numbers_number_ring_pool_id_key;
      SQL
      # Which process answers at a shard's URL (issue #10). Peers told a replaced worker from
      # the old one by its lock session's backend pid, but a PostgreSQL restart gives every
      # live shard a new session too: each peer then reset its breakers and closed its clients
      # with calls in flight, right when the shards were taking their pools back. The process
      # (host, pid and a random token, see Ownership) changes only with the process.
      3 => <<~SQL
        alter table ringpool_shards add column process text not null default '';
      SQL
    }.freeze

    # Applies the migrations the database lacks.
    # @param db [Weft::Postgres::Pool]
    # @return [Array<Integer>] the versions applied now
    def self.migrate(db)
      db.transaction do |conn|
        conn.exec_params("select pg_advisory_xact_lock($1, $2)", LOCK)
        conn.exec("set local client_min_messages to warning") # no "already exists, skipping" notices
        conn.exec("create table if not exists ringpool_schema (version integer primary key)")
        done = conn.exec("select version from ringpool_schema").map { |row| Integer(row["version"]) }
        MIGRATIONS.keys.sort.reject { |version| done.include?(version) }.each do |version|
          conn.exec(MIGRATIONS.fetch(version))
          conn.exec_params("insert into ringpool_schema (version) values ($1)", [version])
        end
      end
    end
  end
end
