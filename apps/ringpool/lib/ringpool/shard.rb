# frozen_string_literal: true

require "fileutils"
require "json"

module Ringpool
  # One shard: a process (a Weft worker) that owns some pools, answers for any pool, and talks
  # to the other shards. It wires the parts together:
  #
  #   Store, Catalog      PostgreSQL, and every pool's overflow number
  #   Allocator           the pools this shard owns, in memory
  #   Ownership           which shard owns which pool (advisory locks), this shard's share
  #   FanOut              items of other shards' pools, sent to them
  #   API, PeerAPI        the public Rack app, and the one on this shard's own unix socket
  #
  # The public API works as soon as the shard exists; #run (inside the reactor, e.g. from Weft's
  # `worker_task` hook) gives it its identity, starts its peer listener and keeps ownership up to
  # date until cancelled.
  class Shard
    # @return [Settings]
    attr_reader :settings
    # @return [Store]
    attr_reader :store
    # @return [String, nil] this shard's URL once #run started
    attr_reader :url

    # @param settings [Settings]
    def initialize(settings)
      @settings = settings
      @db = Weft::Postgres::Pool.new(settings.database_url, limit: settings.db_pool_size, application_name: "ringpool")
      @store = Store.new(@db)
      @catalog = Catalog.new(@store, snapshot: settings.catalog_snapshot)
      @allocator = Allocator.new(@store)
      @fan_out = FanOut.new(breaker: settings.breaker)
      @overflows = OverflowCounter.new
      @metrics = Metrics.new
      @ownership = nil
      @url = nil
      @dashboard = nil # a Weft::Promise of the last dashboard document (#dashboard)
      @dashboard_made_at = nil
    end

    # @return [API] the public Rack app
    def api
      API.new(self)
    end

    # Serves as shard `url` until cancelled: checks the socket folder
    # (Settings#prepare_socket_dir), binds the peer listener (a second Weft::Server in this
    # reactor, on this shard's unix socket), then migrates the schema, ticks ownership and writes
    # overflow counters every ownership interval. On the way out the peer listener stops
    # gracefully and the lock session closes, so the other shards take the pools over at once.
    # @param url [String] "unix:///path/shard-N.sock", or "http://host:port" (Settings#shard_url)
    # @return [void]
    # @raise [ArgumentError] when others may write to the socket folder
    def run(url)
      @url = url
      @ownership = Ownership.new(url: url, database_url: @settings.database_url, store: @store, catalog: @catalog,
                                 allocator: @allocator, interval: @settings.ownership_interval,
                                 on_shards: @fan_out.method(:shards_seen))
      @settings.prepare_socket_dir
      FileUtils.mkdir_p(File.dirname(URI.parse(url).path)) if url.start_with?("unix:")
      @catalog.load_snapshot
      peer = Weft::Server.new(PeerAPI.new(self), binds: [Settings.peer_bind(url)], shutdown_timeout: 5)
      Weft.spawn(detached: true, name: "ringpool peer listener") { peer.run }
      loop do
        maintain
        sleep(@settings.ownership_interval)
      end
    ensure
      peer&.stop
      @ownership&.close
      @fan_out.close
    end

    # A batch for #warm_up: 40 items of pools that cannot exist (ids start at 1), each answered
    # as invalid without asking PostgreSQL or a peer.
    WARM_UP_BATCH = JSON.generate({ "allocations" => Array.new(40) { |i| { "ring_pool" => -i, "params" => { "campaign" => "warm-up", "i" => i } } } })
    # Read-only statements a warm-up sends through a PostgreSQL pool of its own, at most this long.
    WARM_UP_DATABASE_SECONDS = 3

    # Runs the request path in the process that forks the shards, before it forks (Weft's
    # `warmup` hook, config/weft.rb), so that every shard, a replacement included, inherits it
    # compiled by YJIT instead of compiling it in its first seconds of serving (Ruby 3.3's YJIT
    # compiled 55-108 ms of code in each replacement's first second: bench/results/
    # ringpool-notes.md). Only what needs neither a peer nor this shard's identity: GET /health
    # and a batch whose items are all invalid go through Weft's server and the public API; then,
    # with `database`, a few read-only statements through a PostgreSQL pool of the warm-up's own
    # (Weft::Postgres::Pool's pipeline), closed before the fork, bounded by
    # WARM_UP_DATABASE_SECONDS (PostgreSQL down at boot: the warm-up fails, Weft logs it, the
    # shards start). Off by default: a shard then compiled ~27 methods and blocks fewer in its
    # first 2 s (86-88 against 114-115), its CPU no different within the noise, for a master that
    # needs PostgreSQL at boot to be warm. What the requests counted in the metrics is forgotten.
    # @param warm [Weft::Server::Warmup]
    # @return [void]
    # @raise [RuntimeError] when an answer is not the expected one
    def warm_up(warm, database: false)
      health = warm.get("/health")
      raise "warm-up: GET /health answered #{health.status}" unless health.status == 200
      batch = warm.post("/allocations", body: WARM_UP_BATCH, headers: API::JSON_HEADERS)
      raise "warm-up: POST /allocations answered #{batch.status}" unless batch.status == 200
      warm_up_database if database
    ensure
      @metrics = Metrics.new
    end

    # Allocates a public request's items: this shard's pools here, the others' through FanOut,
    # all at once under the configured deadline. The overflow numbers handed out are counted
    # here, by the shard that answers the client, whoever decided them (peers do not count).
    # @param entries [Array<Validation::Item, Result>] checked items, or their errors
    # @return [Array<Result>] in item order
    def allocate(entries)
      results = Array.new(entries.size)
      local = []
      remote = Hash.new { |hash, url| hash[url] = [] }
      Weft.deadline(@settings.deadline) do
        resolved = resolve_pools(entries)
        entries.each_with_index do |entry, index|
          next results[index] = entry if entry.is_a?(Result)
          pool = @catalog[entry.ring_pool]
          next results[index] = unknown(entry, resolved) unless pool
          item = Allocator::Item.new(pool, entry.params)
          if @allocator.owns?(pool.id)
            local << [index, item]
          elsif (owner = @ownership&.owner(pool.id)) && owner != @url
            remote[owner] << [index, item]
          else
            results[index] = unowned(pool)
          end
        end
        moved = []
        place(local, remote, results, moved)
        place(*route(moved), results, []) unless moved.empty?
        moved.each { |index, item| results[index] = settle(results[index], item) }
      end
      results.each { |result| @overflows.count(result) }
    end

    # Allocates a peer's items, which must be of pools this shard owns (others answer not_owner).
    # @param entries [Array<Validation::Item, Result>]
    # @param deadline [Float, nil] seconds the caller still waits
    # @return [Array<Result>]
    def allocate_owned(entries, deadline)
      Weft.deadline(deadline ? [deadline, @settings.deadline].min : @settings.deadline) do
        items = entries.map do |entry|
          next entry if entry.is_a?(Result)
          state = @allocator.state(entry.ring_pool)
          state ? Allocator::Item.new(state.pool, entry.params) : Result.not_owner(entry.ring_pool)
        end
        results = items.dup
        owned = items.each_index.select { |index| items[index].is_a?(Allocator::Item) }
        @allocator.allocate(owned.map { |index| items[index] }).each_with_index { |result, i| results[owned[i]] = result }
        results
      end
    end

    # Creates a pool and takes it over at once.
    # @return [RingPool]
    # @raise [Store::NumbersTaken], or the store's errors
    def create_pool(**spec)
      pool = @store.create_pool(**spec)
      @catalog.add(pool)
      begin
        @ownership&.claim_new(pool)
      rescue StandardError => e
        Weft.logger.warn("ringpool #{@url}: could not claim new pool #{pool.id} (#{e.message}); the next tick will")
      end
      pool
    end

    # @param id [Integer]
    # @return [String, nil] the URL of the shard that owns the pool, as far as this shard knows
    def owner(id)
      @ownership&.owner(id)
    end

    # Counts a public allocation request for the dashboard.
    # @param results [Array<Result>]
    # @param seconds [Float] how long it took
    # @return [void]
    def record(results, seconds)
      @metrics.record(results, seconds)
    end

    # @return [Hash] this shard's health and metrics, for the peer asking for the dashboard
    def report
      { "health" => health, "metrics" => @metrics.snapshot }
    end

    # Seconds a dashboard document answers requests after it was made (#dashboard).
    DASHBOARD_TTL = 0.5

    # The dashboard document (Dashboard.summarize): this shard's report and every live peer's,
    # asked all at once, each given at most a second; a peer that does not answer is listed as
    # unreachable. Shared by every request that asks while it is being made or within
    # DASHBOARD_TTL after: each making asks every peer, so a client polling GET /dashboard.json
    # hard made the whole cluster work for every one of its requests (with N shards, N - 1 peer
    # calls each). The page refreshes once a second.
    # @return [Hash]
    def dashboard
      making = @dashboard
      return making.wait if making && (making.pending? || monotonic_now - @dashboard_made_at < DASHBOARD_TTL)
      promise = @dashboard = Weft::Promise.new
      begin
        document = assemble_dashboard
      rescue StandardError => e
        @dashboard = nil
        promise.reject(e)
        raise
      end
      @dashboard_made_at = monotonic_now
      promise.fulfill(document)
      document
    end

    # @return [Hash] for GET /health
    def health
      { "status" => "ok", "shard" => @url, "pid" => Process.pid, "owned_pools" => @allocator.owned_ids.size,
        "known_pools" => @catalog.size, "ownership" => @ownership&.failed? ? "failing" : "ok",
        "takeovers" => @ownership ? @ownership.takeovers.transform_keys(&:to_s) : {},
        "peers" => @fan_out.statistics }
    end

    private

    # #dashboard's document, made afresh.
    def assemble_dashboard
      reports = { @url.to_s => report }
      reports.merge!(@fan_out.reports(@fan_out.peer_urls - [@url]))
      shards = reports.sort.map do |url, reported|
        reported ? shard_status(reported["health"]) : { "shard" => url, "status" => "unreachable", "peers" => [] }
      end
      Dashboard.summarize(reports.values.compact.map { |reported| reported["metrics"] }, shards, @metrics.now)
    end

    def monotonic_now
      Process.clock_gettime(Process::CLOCK_MONOTONIC)
    end

    # Migrates once, ticks ownership, writes counters; within a bound. A failure is
    # tried again next time (PostgreSQL down at boot, say); it is logged when it starts (or
    # changes) and when it ends, not every tick.
    def maintain
      Weft.deadline([@settings.ownership_interval * 2, Ownership::SESSION_TIMEOUT].max + 1) do
        unless @migrated
          Schema.migrate(@db)
          @migrated = true
        end
        @ownership.tick
        @overflows.flush(@store)
      end
      Weft.logger.info("ringpool #{@url}: maintenance works again") if @failure
      @failure = nil
    rescue StandardError => e
      failure = "#{e.class}: #{e.message.lines.first.to_s.strip}"
      Weft.logger.warn("ringpool #{@url}: maintenance failed, holding no pools until it works: #{failure}") unless failure == @failure
      @failure = failure
    end

    # Four tasks, 60 statements each, over two connections: pipelined as a shard's are.
    def warm_up_database
      db = Weft::Postgres::Pool.new(@settings.database_url, limit: 2, application_name: "ringpool warm-up")
      Weft.deadline(WARM_UP_DATABASE_SECONDS) do
        Weft.gather(Array.new(4) { Weft.spawn { 60.times { |i| db.query("select $1::bigint as id, now() as at", i).to_a } } })
      end
    ensure
      db&.close
    end

    # Pools created on other shards since the last refresh, and their owners, are looked up at
    # once.
    # @return [Boolean] false when they could not be (PostgreSQL unreachable)
    def resolve_pools(entries)
      ids = entries.filter_map { |entry| entry.ring_pool if entry.is_a?(Validation::Item) }
      begin
        @catalog.resolve(ids)
      rescue *Allocator::STORAGE_ERRORS
        return false
      end
      begin
        @ownership&.resolve(ids.select { |id| @catalog[id] })
      rescue *Allocator::STORAGE_ERRORS
        nil # those pools count as unowned for this request
      end
      true
    end

    def shard_status(health)
      peers = health.fetch("peers", {}).map do |url, peer|
        { "url" => url }.merge(peer.slice("breaker", "admitted_fraction", "requests", "starved"))
      end
      health.slice("shard", "pid", "owned_pools", "known_pools", "ownership").merge("status" => "ok", "peers" => peers)
    end

    # The error for an item naming a pool the catalog does not have.
    def unknown(entry, resolved)
      return Result.error(entry.ring_pool, "unknown_ring_pool", "no ring pool #{entry.ring_pool}") if resolved
      Result.error(entry.ring_pool, "storage_unavailable", "the ring pool could not be looked up")
    end

    # Nobody holds the pool right now: its owner died and the others have not taken it over yet,
    # or PostgreSQL is unreachable (then this shard's own lock session failed too).
    def unowned(pool)
      Result.overflow(pool, @ownership&.failed? ? "storage_unavailable" : "shard_unavailable")
    end

    # Allocates `local` items here and sends `remote` ones to their owners, all at once, into
    # `results`; items whose shard answered not_owner go to `moved` with their answer in place.
    # @param local [Array<(Integer, Allocator::Item)>] index and item
    # @param remote [Hash{String => Array<(Integer, Allocator::Item)>}] by owner URL
    def place(local, remote, results, moved)
      # Sent first, gathered after this shard's own items are allocated: both at once.
      tickets = @fan_out.dispatch(remote.transform_values { |pairs| pairs.map(&:last) })
      answers = local.zip(@allocator.allocate(local.map(&:last)))
      @fan_out.results(tickets).each { |url, results_of| answers.concat(remote[url].zip(results_of)) }
      answers.each do |(index, item), result|
        results[index] = result
        moved << [index, item] if result.kind == :not_owner
      end
    end

    # Where items whose pools moved since the last tick are now: one lookup in PostgreSQL, so
    # each is asked again once, of its new owner (an item whose pool has none gets the overflow
    # number, as one whose new owner answers not_owner too).
    # @return [(Array, Hash)] local and remote items, as #place takes them
    def route(moved)
      owners = @ownership ? @ownership.reroute(moved.map { |_, item| item.pool.id }) : {}
      local = []
      remote = Hash.new { |hash, url| hash[url] = [] }
      moved.each do |index, item|
        owner = owners[item.pool.id]
        if @allocator.owns?(item.pool.id)
          local << [index, item]
        elsif owner && owner != @url
          remote[owner] << [index, item]
        end
      end
      [local, remote]
    rescue *Allocator::STORAGE_ERRORS
      [[], {}] # no lookup: the items keep their overflow numbers
    end

    # A pool that moved and could not be found again answers not_owner: its item gets the
    # overflow number.
    def settle(result, item)
      result.kind == :not_owner ? Result.overflow(item.pool, "shard_unavailable") : result
    end
  end
end
