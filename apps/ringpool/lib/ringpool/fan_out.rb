# frozen_string_literal: true

require "json"
require "weft/resilience"
require_relative "result"

module Ringpool
  # Sends each peer shard the items of the pools it owns, all at once, over HTTP/1.1 keep-alive
  # (a Weft::HTTP::Client per peer, which keeps its connections open between requests), and
  # gathers the answers. Whatever goes wrong with a peer — refused, reset, a bad answer, the
  # caller's deadline passing — its items get their pools' overflow numbers with reason
  # `shard_unavailable`; #call itself never raises and never waits past the deadline it runs
  # under (Weft.deadline: the tasks it spawns inherit it).
  #
  # Each peer has a Weft::CircuitBreaker: a peer that keeps failing or missing the deadline is
  # not called at all for a while (its items get the overflow number at once, without waiting
  # for the deadline), then gets a rising share of the calls again (the breaker's ramp).
  # Breakers are registered as "ringpool peer URL", so Weft's server statistics list them.
  class FanOut
    PATH = "/shard/allocations"
    REPORT_PATH = "/shard/report"
    REPORT_TIMEOUT = 1.0
    # The header that carries the caller's remaining time to the peer, in seconds.
    DEADLINE_HEADER = "ringpool-deadline"

    # A peer's answer that cannot be used: it counts as a failure of the peer.
    class BadAnswer < StandardError; end

    # @param breaker [Hash] options for each peer's Weft::CircuitBreaker
    # @param client_options [Hash] for each peer's Weft::HTTP::Client
    def initialize(breaker: {}, **client_options)
      @breaker_options = breaker
      @client_options = { connect_timeout: 1, read_timeout: 5, idle_timeout: 30 }.merge(client_options)
      @clients = {}
      @breakers = {}
      @sessions = {}
    end

    # Starts afresh with a peer whose URL another process now answers (a worker replaced after
    # a crash): the breaker opened on the dead process says nothing about the new one, and
    # holding its pools' items to overflow numbers for the breaker's open and ramp time would
    # undo the takeover.
    # @param sessions [Hash{String => Integer}] shard URL => its lock session's backend pid
    # @return [void]
    def shards_seen(sessions)
      sessions.each do |url, session|
        previous = @sessions[url]
        @sessions[url] = session
        next if previous.nil? || previous == session
        @breakers.delete(url)
        @clients.delete(url)&.close
      end
    end

    # @param groups [Hash{String => Array<Allocator::Item>}] peer URL => the items it owns
    # @return [Hash{String => Array<Result>}] per peer, a result per item, in item order
    def call(groups)
      peers = groups.to_a
      # Weft.scatter runs every peer at once under the caller's deadline and answers a peer that
      # failed or is late with the fallback, so this never raises and never waits past it.
      answers = Weft.scatter(peers, fallback: ->((_url, items), _error) { fallback(items) }) do |url, items|
        breaker(url).call(fallback: ->(_error) { fallback(items) }) { post(url, items) }
      end
      peers.each_with_index.to_h { |(url, _items), index| [url, answers[index]] }
    end

    # @return [Hash{String => Hash}] per peer URL: connections opened, requests sent, and the
    #   state of its breaker (closed, open, ramping) with the share of calls it admits now
    def statistics
      @clients.to_h do |url, client|
        counts = client.statistics.values.first || {}
        breaker = @breakers[url]
        [url, { "connections_opened" => counts.fetch(:created, 0), "requests" => counts.fetch(:checkouts, 0),
                "breaker" => (breaker ? breaker.state : :closed).to_s, "admitted_fraction" => breaker ? breaker.admitted_fraction.round(3) : 1.0 }]
      end
    end

    # @return [Array<String>] the URL of every shard seen at the last ownership tick
    def peer_urls
      @sessions.keys
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
      @breakers[url] ||= Weft::CircuitBreaker.new("ringpool peer #{url}", **@breaker_options)
    end

    # Closes every peer connection.
    # @return [void]
    def close
      @clients.each_value(&:close)
      @clients.clear
    end

    private

    def post(url, items)
      body = +'{"items":['
      items.each_with_index do |item, index|
        body << "," unless index.zero?
        body << "[" << item.pool.id.to_s << "," << item.params << "]"
      end
      body << "]}"
      headers = { "content-type" => "application/json" }
      remaining = Weft.remaining
      headers[DEADLINE_HEADER] = format("%.6f", remaining) if remaining
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
