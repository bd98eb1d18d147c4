# frozen_string_literal: true

require "json"
require "weft/resilience"
require_relative "result"

module Ringpool
  # Sends each peer shard the items of the pools it owns over HTTP/1.1 keep-alive (a
  # Weft::HTTP::Client per peer, which keeps its connections open between requests), and
  # gathers the answers. Whatever goes wrong with a peer — refused, reset, a bad answer, the
  # caller's deadline passing — its items get their pools' overflow numbers with reason
  # `shard_unavailable`; #results never raises and never waits past the caller's deadline
  # (Weft.deadline).
  #
  # Calls to a peer are batched across requests, as GroupCommit batches INSERTs: at most
  # CALLS_IN_FLIGHT calls per peer at once, and the items of every request that asks meanwhile
  # go together in the next call. Under light load a request's call leaves at once (on the
  # reactor's next turn); under load calls grow instead of multiplying, and a shard pays the
  # cost of an HTTP exchange (both ends: the client, the peer's server, their tasks and timers)
  # once per batch instead of once per request (apps/ringpool/bench/cpu_profile.rb). A call
  # runs in a task of its own until the latest deadline of the requests in it; a request whose
  # own deadline passes first stops waiting and answers with the overflow numbers.
  #
  # Each peer has a Weft::CircuitBreaker, which judges the calls: a peer that keeps failing or
  # missing the deadline is not called at all for a while (its items get the overflow number
  # without waiting for the deadline), then gets a rising share of the calls again (the
  # breaker's ramp). Breakers are registered as "ringpool peer URL", so Weft's server
  # statistics list them; their changes of state are logged (warnings).
  #
  # The peer is given less time than the caller waits (REPLY_SHARE of it), so that a peer whose
  # own PostgreSQL INSERT is slow still answers in time, with `storage_unavailable` for the
  # items it could not store: slow storage is not a slow peer. When both ends had the same
  # deadline, the peer's answer raced the caller's timer and lost, each such call counted
  # against the peer, and at 400 requests/s on a busy machine a few slow INSERTs opened the
  # breakers, which then shed every item of a healthy peer for their open time and ramp
  # (bench/results/ringpool-throughput/5-*.md).
  class FanOut
    PATH = "/shard/allocations"
    REPORT_PATH = "/shard/report"
    REPORT_TIMEOUT = 1.0
    # The header that carries the caller's remaining time to the peer, in seconds.
    DEADLINE_HEADER = "ringpool-deadline"
    # Calls to one peer at once (see the class comment).
    CALLS_IN_FLIGHT = 2
    # The share of the caller's remaining time the peer is told it has (see the class comment);
    # the rest, 10 ms of a 50 ms deadline, carries the answer back: the peer's JSON, the socket,
    # the caller's parse, and a reactor turn or two on a busy machine.
    REPLY_SHARE = 0.8

    # A peer's answer that cannot be used: it counts as a failure of the peer.
    class BadAnswer < StandardError; end

    # The most of a call's body a peer reads (PeerAPI); a batch grows to it, never past it (a
    # peer cut a 6 MB one short and refused it, failing every item of every request in it).
    MAX_BODY = 4_608 * 1_024
    # A body's bytes beyond its items' params: `{"items":[` and `]}`; and each item's own:
    # brackets, comma and a pool id of up to 10 digits.
    ENVELOPE_BYTES = 16
    ITEM_BYTES = 14

    # The items of the requests that go to one peer in one call, the promise of their results
    # (in the same order), the latest monotonic time a request in it waits until, and the bytes
    # its items take in the call's body.
    Batch = Struct.new(:items, :promise, :deadline, :bytes)
    # A peer's batching: the batches waiting for a call (the last one gathering items), calls
    # running, and whether one is starting.
    PeerQueue = Struct.new(:batches, :running, :starting)
    # One request's share of a batch: where its items start, and until when it waits.
    Ticket = Struct.new(:items, :batch, :offset, :deadline)

    # @param breaker [Hash] options for each peer's Weft::CircuitBreaker
    # @param client_options [Hash] for each peer's Weft::HTTP::Client
    def initialize(breaker: {}, **client_options)
      @breaker_options = breaker
      @client_options = { connect_timeout: 1, read_timeout: 5, idle_timeout: 30 }.merge(client_options)
      @clients = {}
      @breakers = {}
      @processes = {}
      @queues = {}
    end

    # Starts afresh with a peer whose URL another process now answers (a worker replaced after
    # a crash): the breaker opened on the dead process says nothing about the new one, and
    # holding its pools' items to overflow numbers for the breaker's open and ramp time would
    # undo the takeover. The same process keeps its breaker and client, calls in flight included.
    # @param processes [Hash{String => String}] shard URL => the process answering there
    #   (Ownership#process)
    # @return [void]
    def shards_seen(processes)
      processes.each do |url, process|
        previous = @processes[url]
        @processes[url] = process
        next if previous.nil? || previous == process
        @breakers.delete(url)
        @clients.delete(url)&.close
      end
    end

    # Sends and gathers at once: #results of #dispatch.
    # @param groups [Hash{String => Array<Allocator::Item>}] peer URL => the items it owns
    # @return [Hash{String => Array<Result>}] per peer, a result per item, in item order
    def call(groups)
      results(dispatch(groups))
    end

    # Queues each peer's items for its next call, without waiting: the caller does its own work
    # meanwhile, then collects with #results.
    # @param groups [Hash{String => Array<Allocator::Item>}] peer URL => the items it owns
    # @return [Hash{String => Ticket}]
    def dispatch(groups)
      remaining = Weft.remaining
      deadline = remaining ? now + remaining : Float::INFINITY
      groups.to_h { |url, items| [url, enqueue(url, items, deadline)] }
    end

    # Waits for the answers of #dispatch, each peer's until the caller's deadline at the latest.
    # @param tickets [Hash{String => Ticket}]
    # @return [Hash{String => Array<Result>}] per peer, a result per item, in item order
    def results(tickets)
      tickets.transform_values { |ticket| answers(ticket) }
    end

    # @return [Hash{String => Hash}] per peer URL: connections opened, requests sent, the state
    #   of its breaker (closed, open, ramping) with the share of calls it admits now, and how
    #   many calls the breaker left unjudged because this shard, not the peer, was late
    #   (Weft::CircuitBreaker's `starved`: its reactor busy when the deadline passed)
    def statistics
      @clients.to_h do |url, client|
        counts = client.statistics.values.first || {}
        breaker = @breakers[url]&.statistics
        [url, { "connections_opened" => counts.fetch(:created, 0), "requests" => counts.fetch(:checkouts, 0),
                "breaker" => (breaker ? breaker[:state] : :closed).to_s,
                "admitted_fraction" => breaker ? breaker[:admitted_fraction].round(3) : 1.0,
                "starved" => breaker ? breaker[:starved] : 0 }]
      end
    end

    # @return [Array<String>] the URL of every shard seen at the last ownership tick
    def peer_urls
      @processes.keys
    end

    # Asks each peer for its report (PeerAPI's GET /shard/report), all at once, for at most
    # REPORT_TIMEOUT seconds. Not through the breakers: the dashboard shows them, it does not
    # judge peers.
    # @param urls [Array<String>]
    # @return [Hash{String => Hash, nil}] per URL its report, nil when it did not answer
    def reports(urls)
      answers = Weft.scatter(urls, deadline: REPORT_TIMEOUT, fallback: ->(_url, _error) {}) do |url|
        response = client(url).get(REPORT_PATH)
        JSON.parse(response.body) if response.status == 200
      end
      urls.zip(answers).to_h
    end

    # @param url [String]
    # @return [Weft::CircuitBreaker] the peer's breaker
    def breaker(url)
      @breakers[url] ||= Weft::CircuitBreaker.new("ringpool peer #{url}", **@breaker_options).on_change do |breaker, from, to|
        counts = breaker.statistics
        Weft.logger.warn("ringpool: breaker of peer #{url} #{from} -> #{to} (#{counts[:failures]} failed, " \
                         "#{counts[:successes]} succeeded, #{counts[:rejected]} refused so far)")
      end
    end

    # Closes every peer connection.
    # @return [void]
    def close
      @clients.each_value(&:close)
      @clients.clear
    end

    private

    def now
      Process.clock_gettime(Process::CLOCK_MONOTONIC)
    end

    def enqueue(url, items, deadline)
      queue = (@queues[url] ||= PeerQueue.new([], 0, false))
      bytes = items.sum { |item| item.params.bytesize + ITEM_BYTES }
      batch = queue.batches.last
      # A request's items alone always fit (the public body limit is the peer's); others go to a
      # batch of their own rather than past what the peer reads.
      if batch.nil? || (!batch.items.empty? && batch.bytes + bytes > MAX_BODY - ENVELOPE_BYTES)
        batch = Batch.new([], Weft::Promise.new, deadline, 0)
        queue.batches << batch
      end
      offset = batch.items.size
      batch.items.concat(items)
      batch.bytes += bytes
      batch.deadline = deadline if deadline > batch.deadline
      if queue.running < CALLS_IN_FLIGHT && !queue.starting
        queue.running += 1
        queue.starting = true
        Weft.spawn(detached: true, name: "ringpool peer call") { flush(url, queue) }
      end
      Ticket.new(items, batch, offset, deadline)
    end

    # Calls the peer with the open batches, oldest first, and those that gathered meanwhile,
    # until none is left.
    def flush(url, queue)
      queue.starting = false
      while (batch = queue.batches.shift)
        send_batch(url, batch)
      end
    ensure
      queue.running -= 1
    end

    def send_batch(url, batch)
      items = batch.items
      seconds = batch.deadline - now
      answers = if seconds <= 0
                  fallback(items)
                else
                  Weft.deadline(seconds.finite? ? seconds : nil) do
                    breaker(url).call(fallback: ->(_error) { fallback(items) }) { post(url, items) }
                  end
                end
      batch.promise.fulfill(answers)
    rescue StandardError => e
      batch.promise.reject(e)
    ensure
      # Cancelled (the shard is stopping): the waiters fall back.
      batch.promise.reject(IOError.new("the peer call was cancelled")) if batch.promise.pending?
    end

    # One request's answers from its batch, or the overflow numbers when the batch failed or
    # the request's deadline passed before it ended. A batch that has ended is used however late
    # the request collects it (its own INSERT may have taken it past its deadline): the peer
    # stored those numbers, and overflow numbers instead would waste their lockouts.
    def answers(ticket)
      promise = ticket.batch.promise
      if promise.pending?
        timeout = ticket.deadline - now
        return fallback(ticket.items) if timeout <= 0
        promise.wait(timeout: timeout.finite? ? timeout : nil)
      end
      promise.wait[ticket.offset, ticket.items.size]
    rescue StandardError # the deadline passed, or the call failed: its items fall back
      fallback(ticket.items)
    end

    def post(url, items)
      body = +'{"items":['
      items.each_with_index do |item, index|
        body << "," unless index.zero?
        body << "[" << item.pool.id.to_s << "," << item.params << "]"
      end
      body << "]}"
      headers = { "content-type" => "application/json" }
      remaining = Weft.remaining
      headers[DEADLINE_HEADER] = format("%.6f", remaining * REPLY_SHARE) if remaining
      read(client(url).post(PATH, body: body, headers: headers), items)
    end

    # A peer's answer, item by item (PeerAPI's compact shape: Result.from_peer).
    # @raise [BadAnswer] when it is not a usable answer at all
    def read(response, items)
      raise BadAnswer, "status #{response.status}" unless response.status == 200
      results = begin
        JSON.parse(response.body.force_encoding(Encoding::UTF_8))["results"]
      rescue JSON::ParserError, TypeError, NoMethodError
        raise BadAnswer, "not a JSON object with results"
      end
      raise BadAnswer, "expected #{items.size} results" unless results.is_a?(Array) && results.size == items.size
      items.each_with_index.map do |item, index|
        Result.from_peer(results[index], item.pool) || Result.overflow(item.pool, "shard_unavailable")
      end
    end

    def fallback(items)
      items.map { |item| Result.overflow(item.pool, "shard_unavailable") }
    end

    def client(url)
      @clients[url] ||= Weft::HTTP::Client.new(url, **@client_options)
    end
  end
end
