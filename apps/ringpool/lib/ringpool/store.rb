# frozen_string_literal: true

require "json"
require_relative "clock"
require_relative "e164"
require_relative "ring_pool"

module Ringpool
  # Every SQL statement of the app, run through a Weft::Postgres::Pool: statements that many
  # requests issue at once share connections in pipeline mode, so one shard needs few
  # connections however many requests it has in flight.
  class Store
    # Some of the numbers of a new pool already belong to another pool or are another pool's
    # overflow number, or its overflow number is another pool's tracked number.
    class NumbersTaken < StandardError
      # @return [Array<String>]
      attr_reader :numbers

      # @param numbers [Array<String>] the numbers in the way
      # @param what [String] why they are
      def initialize(numbers, what = "numbers already in a ring pool")
        @numbers = numbers
        super("#{what}: #{numbers.join(', ')}")
      end
    end

    # The advisory lock key (two int4s) that makes pool creations take turns: each checks that
    # its numbers are no pool's overflow number and its overflow number no pool's tracked
    # number, which no unique constraint says, so two at once could each miss the other.
    CREATE_POOL_LOCK = [0x52494E47, 1].freeze

    # The end of a number's latest lockout, in microseconds since the epoch (0 if never handed out).
    LATEST_LOCKOUT_END = <<~SQL
      coalesce((select (extract(epoch from upper(a.lockout)) * 1000000)::bigint
                  from allocations a where a.number = n.number
                 order by upper(a.lockout) desc limit 1), 0)
    SQL

    # Lockouts arrive as integers of microseconds since the epoch, made timestamptz exactly
    # (to_timestamp would take a float of seconds).
    RECORD = <<~SQL
      insert into allocations (ring_pool_id, number, lockout, params)
      select a.p, a.n, tstzrange(timestamptz 'epoch' + a.f * interval '1 microsecond',
                                 timestamptz 'epoch' + a.u * interval '1 microsecond'), a.j
        from jsonb_to_recordset($1::jsonb) as a(p integer, n text, f bigint, u bigint, j jsonb)
      on conflict do nothing
      returning number, (extract(epoch from lower(lockout)) * 1000000)::bigint
    SQL

    # @param db [Weft::Postgres::Pool]
    def initialize(db)
      @db = db
    end

    # @return [Weft::Postgres::Pool]
    attr_reader :db

    # Creates a pool and its numbers in one transaction. A number is tracked in one pool or is
    # an overflow number, never both: an overflow number handed out during another pool's
    # lockout of it would have its calls attributed to that pool's allocation.
    # @return [RingPool]
    # @raise [NumbersTaken] when a number is in another pool already or is another pool's
    #   overflow number, or the overflow number is another pool's tracked number
    def create_pool(name:, numbers:, overflow_number:, lockout_seconds:)
      @db.transaction do |conn|
        conn.exec_params("select pg_advisory_xact_lock($1, $2)", CREATE_POOL_LOCK)
        taken = conn.exec_params("select number from numbers where number = any($1::text[]) order by number",
                                 [text_array(numbers)]).column_values(0)
        raise NumbersTaken, taken unless taken.empty?
        overflows = conn.exec_params("select distinct overflow_number from ring_pools where overflow_number = any($1::text[]) order by 1",
                                     [text_array(numbers)]).column_values(0)
        raise NumbersTaken.new(overflows, "numbers that are a ring pool's overflow number") unless overflows.empty?
        tracked = conn.exec_params("select number from numbers where number = $1", [overflow_number]).column_values(0)
        raise NumbersTaken.new(tracked, "an overflow number that a ring pool tracks") unless tracked.empty?
        row = conn.exec_params(<<~SQL, [name, overflow_number, lockout_seconds]).first
          insert into ring_pools (name, overflow_number, lockout_seconds) values ($1, $2, $3)
          returning id, overflow_number, lockout_seconds
        SQL
        conn.exec_params(<<~SQL, [text_array(numbers), row["id"]])
          insert into numbers (number, ring_pool_id) select unnest($1::text[]), $2
        SQL
        ring_pool(row)
      end
    rescue PG::UniqueViolation
      # Another request took one of the numbers between the check and the insert.
      retry
    end

    # @param ids [Array<Integer>, nil] these pools only (nil: all)
    # @param after [Integer] pools with a greater id only
    # @return [Array<RingPool>]
    def pools(ids: nil, after: 0)
      sql = +"select id, overflow_number, lockout_seconds from ring_pools where id > $1"
      params = [after]
      if ids
        sql << " and id = any($2::integer[])"
        params << int_array(ids)
      end
      @db.query("#{sql} order by id", *params).map { |row| ring_pool(row) }
    end

    # The numbers of some pools with the end of each one's latest lockout: what a shard needs to
    # rebuild the pools' state when it takes them over.
    # @param ids [Array<Integer>]
    # @return [Hash{Integer => Array<(String, Integer)>}] pool id => [[number, free_at], ...]
    def numbers_with_lockouts(ids)
      states = ids.to_h { |id| [id, []] }
      @db.query(<<~SQL, int_array(ids)).each do |row|
        select n.ring_pool_id, n.number, #{LATEST_LOCKOUT_END} as free_at
          from numbers n where n.ring_pool_id = any($1::integer[])
      SQL
        states[Integer(row["ring_pool_id"])] << [row["number"], Integer(row["free_at"])]
      end
      states
    end

    # One row of #record's document, up to its params.
    ROW = %({"p":%d,"n":"%s","f":%d,"u":%d,"j":)

    # Stores allocations in one statement (GroupCommit gathers them across requests). A row that
    # the exclusion constraint refuses — its number is already held for an overlapping lockout —
    # is skipped, not an error: the caller learns which from the result.
    # @param picks [Array<(PoolState::Pick, String)>] each pick with its params as JSON text
    # @return [true, Array<(String, Integer)>] true when every row was stored (the usual case,
    #   told by the count alone), else the rows stored: number and lockout start
    #   (microseconds), which tell apart two picks of one number in one statement
    def record(picks)
      # Lockouts go as microseconds since the epoch and come back as PostgreSQL's exact
      # timestamptz: cheaper than ISO 8601 text on both sides. Short keys: PostgreSQL parses the
      # whole document. Written into one string: a string per row and per number in it, then
      # joined, were ~5 objects a row (apps/ringpool/bench/cpu_profile.rb, PROFILE=allocations).
      document = +"["
      picks.each_with_index do |(pick, params), index|
        document << "," unless index.zero?
        document << format(ROW, pick.state.pool.id, pick.number, pick.locked_from, pick.locked_until) << params << "}"
      end
      document << "]"
      result = @db.query(RECORD, document)
      # The rows stored are read only when some were refused: ~4 objects a row otherwise.
      return true if result.ntuples == picks.size
      result.values.map { |number, from| [number, Integer(from)] }
    end

    # Adds to the overflow counters.
    # @param counts [Hash{(Integer, String) => Integer}] (pool id, reason) => how many more
    # @return [void]
    def add_overflows(counts)
      return if counts.empty?
      # Sorted, so that concurrent statements lock the counter rows in the same order.
      rows = counts.sort.map { |(id, reason), count| { ring_pool_id: id, reason: reason, count: count } }
      @db.query(<<~SQL, JSON.generate(rows))
        insert into overflow_counts (ring_pool_id, reason, count)
        select o.ring_pool_id, o.reason, o.count
          from jsonb_to_recordset($1::jsonb) as o(ring_pool_id integer, reason text, count bigint)
         where exists (select 1 from ring_pools p where p.id = o.ring_pool_id)
         order by 1, 2
        on conflict (ring_pool_id, reason) do update set count = overflow_counts.count + excluded.count
      SQL
    end

    # The allocation whose lockout covers an instant.
    # @param number [String] E.164
    # @param at [Integer] microseconds since the epoch
    # @return [Hash, nil] ring_pool, params (JSON text), locked_from, locked_until (microseconds)
    def attribution(number, at)
      # A number's lockouts never overlap, so the only candidate is the first to end after the
      # instant: one step down the (number, upper(lockout)) index, however long the history.
      row = @db.query(<<~SQL, number, Clock.iso8601(at)).first
        select ring_pool_id, params::text as params,
               (extract(epoch from lower(lockout)) * 1000000)::bigint as locked_from,
               (extract(epoch from upper(lockout)) * 1000000)::bigint as locked_until
          from (select * from allocations where number = $1 and upper(lockout) > $2::timestamptz
                 order by upper(lockout) limit 1) a
         where lockout @> $2::timestamptz
      SQL
      row && { ring_pool: Integer(row["ring_pool_id"]), params: row["params"],
               locked_from: Integer(row["locked_from"]), locked_until: Integer(row["locked_until"]) }
    end

    # A pool as GET /ring_pools/:id shows it, from the table (any shard can answer).
    # @return [Hash, nil]
    def report(id)
      row = @db.query(<<~SQL, id).first
        select p.id, p.name, p.overflow_number, p.lockout_seconds, p.created_at,
               (select count(*) from numbers n join allocations a on a.number = n.number
                 where n.ring_pool_id = p.id) as allocations,
               (select coalesce(jsonb_object_agg(o.reason, o.count), '{}') from overflow_counts o
                 where o.ring_pool_id = p.id)::text as overflows
          from ring_pools p where p.id = $1
      SQL
      return nil unless row
      numbers = numbers_with_lockouts([id]).fetch(id).sort
      row.merge("numbers" => numbers)
    end

    private

    def ring_pool(row)
      RingPool.new(id: Integer(row["id"]), overflow_number: row["overflow_number"],
                   lockout_seconds: Integer(row["lockout_seconds"]))
    end

    def int_array(values)
      "{#{values.map { |value| Integer(value) }.join(',')}}"
    end

    # E.164 numbers need no quoting in an array literal; anything else is refused.
    def text_array(values)
      bad = values.reject { |value| E164.valid?(value) }
      raise ArgumentError, "not E.164: #{bad.first(3).inspect}" unless bad.empty?
      "{#{values.join(',')}}"
    end
  end
end
