# frozen_string_literal: true

require "pg"
require "securerandom"
require "socket"

module Ringpool
  # Which shard owns which pool, decided by PostgreSQL: a shard owns a pool while it holds the
  # advisory lock (LOCK_CLASS, pool id) on its *lock session*, a connection of its own kept
  # open for that. PostgreSQL releases a session's locks the moment the session ends, so a
  # shard that dies (kill -9, crash, lost network) loses its pools at once, and another shard
  # takes them over on its next #tick, rebuilding their state from the table.
  #
  # Every shard also has a row in ringpool_shards: its URL, the backend pid of its lock session
  # and its process. pg_locks joined with that table is the routing table (pool => owner's URL)
  # that every shard reads each tick.
  #
  # Each tick (every `interval` seconds) a shard:
  # 1. heartbeats its row, which also proves its lock session alive;
  # 2. reads the routing table and drops any pool it believes it owns but no longer holds;
  # 3. counts the live shards (a running lock session and a recent heartbeat; LIVE_SHARDS says
  #    what counts just after PostgreSQL restarted) and takes its fair share,
  #    ceil(pools / live shards): it claims pools nobody holds while below it and gives pools
  #    away while above it.
  #
  # A shard that stops heartbeating (SIGSTOP) keeps its pools — its session still holds the
  # locks — but no longer counts as live, so the others take over the pools it cannot claim.
  # If the lock session fails, the shard drops every pool at once (its locks are gone or
  # cannot be vouched for) and reconnects on the next tick. It keeps the dropped pools' states,
  # though, and claims those pools first when it can again: a pool no other shard held
  # meanwhile is taken back without loading its lockouts (Allocator#readopt), so after a
  # PostgreSQL restart the shards serve again within a tick or two instead of reloading every
  # pool's numbers while the load goes on. In the moment between another
  # shard claiming a pool and the old owner noticing, both may hand out its numbers; the
  # exclusion constraint on allocations keeps that from ever handing one out twice.
  class Ownership
    # The first key of every pool lock (the second is the pool id): "RINH".
    LOCK_CLASS = 0x52494E48
    # Seconds a use of the lock session may take before the session is given up: long enough
    # for a busy machine, short enough to notice a PostgreSQL that stopped answering.
    SESSION_TIMEOUT = 3
    # Taking a pool over loads its numbers' lockouts and builds its state. A shard claiming a
    # thousand pools at once (after PostgreSQL restarted, all of them) cannot do that within
    # SESSION_TIMEOUT on a busy process, and a tick that times out drops everything it claimed:
    # it would never catch up. So a tick claims CLAIM_CHUNK pools at a time, and starts no new
    # chunk once CLAIM_BUDGET seconds have gone; the next tick goes on.
    CLAIM_CHUNK = 100
    CLAIM_BUDGET = 1.0

    ROUTES = <<~SQL
      select l.objid::bigint as ring_pool_id, s.url
        from pg_locks l join ringpool_shards s on s.pid = l.pid
       where l.locktype = 'advisory' and l.granted and l.classid = $1::integer::oid and l.objsubid = 2
         and l.database = (select oid from pg_database where datname = current_database())
    SQL
    ROUTES_OF = "#{ROUTES} and l.objid = any($2::integer[]::oid[])"

    # Which process answers at each shard URL now.
    SHARD_PROCESSES = "select url, process from ringpool_shards"

    # A shard is live with a recent heartbeat and its lock session running. Just after
    # PostgreSQL started (for `$1` seconds) so is one whose last heartbeat was among the last
    # before it stopped, however long it was down: it had no chance to reconnect yet. Without
    # that grace the first shard back counted itself alone, took every pool, and loaded from
    # the table the ones its peers were about to take back from their kept states; then gave
    # them away again.
    LIVE_SHARDS = <<~SQL
      with restart as (
        select pg_postmaster_start_time() as started,
               (select max(heartbeat_at) from ringpool_shards where heartbeat_at < pg_postmaster_start_time()) as last_before
      )
      select count(*) from ringpool_shards s, restart r
       where (s.heartbeat_at > now() - make_interval(secs => $1)
              and exists (select 1 from pg_stat_activity a where a.pid = s.pid))
          or (now() < r.started + make_interval(secs => $1)
              and s.heartbeat_at < r.started and s.heartbeat_at > r.last_before - make_interval(secs => $1))
    SQL

    # @return [String] this shard's URL (what peers connect to)
    attr_reader :url
    # @return [Float] seconds between ticks
    attr_reader :interval

    # @param url [String] this shard's URL, unique among shards sharing the database
    # @param database_url [String] for the lock session
    # @param store [Store]
    # @param catalog [Catalog]
    # @param allocator [Allocator] where owned pools' states live
    # @param interval [Numeric] seconds between ticks
    # @param on_shards [#call, nil] given, every tick, each shard URL's process (see #process),
    #   which changes when another process takes the URL over (a replaced worker) and only then
    def initialize(url:, database_url:, store:, catalog:, allocator:, interval: 1.0, on_shards: nil)
      raise ArgumentError, "interval must be a positive number of seconds" unless interval.is_a?(Numeric) && interval.positive?
      @url = url
      @database_url = database_url
      @store = store
      @catalog = catalog
      @allocator = allocator
      @interval = interval
      @routes = {}
      @session = nil
      @lock = Thread::Mutex.new
      @failed = false
      @unowned = {}
      @on_shards = on_shards
      @takeovers = { retained: 0, loaded: 0 }
      # Host and pid name the process; the token tells it from a later one that reuses the pid.
      @process = "#{Socket.gethostname}/#{Process.pid}/#{SecureRandom.hex(6)}"
    end

    # @return [String] this shard's process, as its peers see it: unlike the lock session, it
    #   stays the same when PostgreSQL restarts
    attr_reader :process

    # @return [Hash{Symbol => Integer}] pools taken over so far: `retained` with the state this
    #   shard kept when it lost them, `loaded` from the table
    def takeovers
      @takeovers.dup
    end

    # @return [Boolean] whether the lock session failed last time it was used (PostgreSQL
    #   unreachable): then this shard holds no pools, and neither, most likely, does any other
    def failed?
      @failed
    end

    # @param id [Integer] a pool id
    # @return [String, nil] the URL of the shard holding the pool, as of the last tick
    def owner(id)
      @allocator.owns?(id) ? @url : @routes[id]
    end

    # Looks up the owners of pools this shard has no route for — created on another shard, or
    # taken over, since the last tick — in one query on the shared connections, so that a new
    # pool is served from every shard at once. A pool found unowned is not asked about again
    # until the next tick.
    # @param ids [Array<Integer>]
    # @return [void]
    # @raise what the query raises
    def resolve(ids)
      missing = ids.reject { |id| @allocator.owns?(id) || @routes.key?(id) || @unowned.key?(id) }.uniq
      return if missing.empty?
      found = @store.db.query(ROUTES_OF, LOCK_CLASS, "{#{missing.join(',')}}").to_h { |row| route(row) }
      missing.each { |id| found[id] ? (@routes[id] = found[id]) : (@unowned[id] = true) }
    end

    # Looks up the owners of pools again, whatever this shard believed: a shard it asked
    # answered that it does not own them (ownership moved since the last tick).
    # @param ids [Array<Integer>]
    # @return [Hash{Integer => String}] pool id => the owner's URL, for the pools that have one
    # @raise what the query raises
    def reroute(ids)
      ids = ids.uniq
      found = @store.db.query(ROUTES_OF, LOCK_CLASS, "{#{ids.join(',')}}").to_h { |row| route(row) }
      ids.each { |id| found[id] ? (@routes[id] = found[id]) : @routes.delete(id) }
      found
    end

    # One round of heartbeat, routing and claiming (see the class comment). Bounded (see
    # #session); a failure drops every pool this shard holds and closes the lock session.
    # @return [void]
    # @raise what went wrong, after dropping the pools
    def tick
      session do |conn|
        heartbeat(conn)
        @on_shards&.call(conn.exec(SHARD_PROCESSES).to_h { |row| [row["url"], row["process"]] })
        @catalog.refresh
        routes = read_routes(conn)
        @allocator.forget { |id| (owner = routes[id]) && owner != @url }
        mine = routes.select { |_id, owner| owner == @url }.keys
        (@allocator.owned_ids - mine).each { |id| @allocator.release(id) }
        # Locked but never taken over (its state failed to load): let it go, to be claimed anew.
        stray = mine - @allocator.owned_ids
        give_away(conn, stray, routes) unless stray.empty?
        mine -= stray
        live = [Integer(conn.exec_params(LIVE_SHARDS, [@interval * 3]).getvalue(0, 0)), 1].max
        fair = (@catalog.size + live - 1) / live
        if mine.size > fair
          give_away(conn, mine.sample(mine.size - fair), routes)
        elsif mine.size < fair
          orphans = (@catalog.ids - routes.keys).shuffle
          claim_share(conn, orphans.partition { |id| @allocator.retained?(id) }.flatten(1), fair - mine.size, routes)
        end
        @routes = routes
        @unowned = {}
        @failed = false
      end
    end

    # Claims a pool this shard just created, so that it is served at once.
    # @param pool [RingPool]
    # @return [Boolean] whether this shard owns it now
    def claim_new(pool)
      session do |conn|
        # A tick may have claimed it first. Not again: advisory locks count, so a second lock
        # would outlive the one unlock that gives the pool away.
        next true if @allocator.owns?(pool.id)
        claimed = claim(conn, [pool.id], 1, @routes.dup)
        @routes = @routes.merge(claimed.to_h { |id| [id, @url] })
        claimed.include?(pool.id)
      end
    end

    # Drops every pool and closes the lock session.
    # @param retain [Boolean] keep the pools' states to claim them back (Allocator#release)
    # @return [void]
    def close(retain: false)
      @allocator.owned_ids.each { |id| @allocator.release(id, retain: retain) }
      @routes = {}
      @session&.close
      @session = nil
    end

    private

    # Runs the block with the lock session (connecting and registering first if needed), one
    # fiber at a time, within SESSION_TIMEOUT (or twice the interval, if longer). Any failure
    # drops the pools: a session in an unknown state cannot vouch for its locks.
    def session
      @lock.synchronize do
        Weft.timeout([@interval * 2, SESSION_TIMEOUT].max) do
          @session ||= register(PG.connect(@database_url))
          yield @session
        end
      rescue StandardError, Weft::Cancelled => e
        @failed = true unless e.is_a?(Weft::Cancelled)
        close(retain: true)
        raise
      end
    end

    def register(conn)
      conn.exec("set application_name to 'ringpool lock session'")
      conn.exec_params(<<~SQL, [@url, @process])
        insert into ringpool_shards (url, pid, process, heartbeat_at) values ($1, pg_backend_pid(), $2, now())
        on conflict (url) do update set pid = excluded.pid, process = excluded.process, heartbeat_at = excluded.heartbeat_at
      SQL
      # A pid is reused by later backends: no other row may claim this session.
      conn.exec_params("delete from ringpool_shards where pid = pg_backend_pid() and url <> $1", [@url])
      conn
    rescue StandardError
      conn.close
      raise
    end

    def heartbeat(conn)
      updated = conn.exec_params("update ringpool_shards set heartbeat_at = now(), pid = pg_backend_pid() where url = $1", [@url])
      register(conn) if updated.cmd_tuples.zero? # someone deleted the row
    end

    # @return [Hash{Integer => String}] pool id => owner URL
    def read_routes(conn)
      conn.exec_params(ROUTES, [LOCK_CLASS]).to_h { |row| route(row) }
    end

    # A row of ROUTES as [pool id, owner URL]. The URL is Ruby's deduplicated copy: the table
    # is read again every tick and kept until the next, long enough for a string per pool to be
    # promoted to the old generation and then die there, a few thousand a second per shard.
    def route(row)
      [Integer(row["ring_pool_id"]), -row["url"]]
    end

    # Claims up to `wanted` of `orphans`, a chunk at a time, within CLAIM_BUDGET. Takeovers are
    # logged (how many, how long): after a restart of PostgreSQL or of a shard they are what
    # the service is waiting for.
    def claim_share(conn, orphans, wanted, routes)
      started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      taken = 0
      until orphans.empty? || wanted <= 0
        claimed = claim(conn, orphans, [wanted, CLAIM_CHUNK].min, routes)
        break if claimed.empty? # the rest are locked by others
        taken += claimed.size
        wanted -= claimed.size
        orphans -= claimed
        break if Process.clock_gettime(Process::CLOCK_MONOTONIC) - started > CLAIM_BUDGET
      end
      return if taken.zero?
      Weft.logger.info(format("ringpool %s: took over %d pools in %.2f s, %d more wanted", @url, taken,
                              Process.clock_gettime(Process::CLOCK_MONOTONIC) - started, [wanted, 0].max))
    end

    # Tries to lock up to `count` of `ids` and takes over those it got: from their retained
    # states where it can (Allocator#readopt), else from the table.
    # @return [Array<Integer>] the pools claimed
    def claim(conn, ids, count, routes)
      claimed = conn.exec_params(<<~SQL, [LOCK_CLASS, "{#{ids.join(',')}}", count]).column_values(0).map { |id| Integer(id) }
        select id from unnest($2::integer[]) as id where pg_try_advisory_lock($1, id) limit $3
      SQL
      return claimed if claimed.empty?
      cold = claimed.reject { |id| @allocator.readopt(@catalog[id]) }
      @takeovers[:retained] += claimed.size - cold.size
      begin
        numbers = cold.empty? ? {} : @store.numbers_with_lockouts(cold)
      rescue StandardError
        claimed.each { |id| conn.exec_params("select pg_advisory_unlock($1, $2)", [LOCK_CLASS, id]) }
        raise
      end
      cold.each { |id| @allocator.adopt(@catalog[id], numbers.fetch(id)) }
      @takeovers[:loaded] += cold.size
      claimed.each { |id| routes[id] = @url }
      claimed
    end

    # Stops serving pools, then unlocks them, so that another shard can take them.
    def give_away(conn, ids, routes)
      ids.each do |id|
        @allocator.release(id)
        conn.exec_params("select pg_advisory_unlock($1, $2)", [LOCK_CLASS, id])
        routes.delete(id)
      end
    end
  end
end
