# frozen_string_literal: true

require "json"
require_relative "result"

module Ringpool
  # Sends each peer shard the items of the pools it owns, all at once, over HTTP/1.1 keep-alive
  # (a Weft::HTTP::Client per peer, which keeps its connections open between requests), and
  # gathers the answers. Whatever goes wrong with a peer — refused, reset, a bad answer, the
  # caller's deadline passing — its items get their pools' overflow numbers with reason
  # `shard_unavailable`; #call itself never raises and never waits past the deadline it runs
  # under (Weft.deadline: the tasks it spawns inherit it).
  #
  # This is the one class to change for the resilience layer: Weft.scatter (deadline plus
  # fallback) in place of the spawn/collect below, and a Weft::CircuitBreaker per peer so that
  # a slow or failing peer is skipped without waiting and let back in gradually.
  class FanOut
    PATH = "/shard/allocations"
    # The header that carries the caller's remaining time to the peer, in seconds.
    DEADLINE_HEADER = "ringpool-deadline"

    # @param client_options [Hash] for each peer's Weft::HTTP::Client
    def initialize(**client_options)
      @client_options = { connect_timeout: 1, read_timeout: 5, idle_timeout: 30 }.merge(client_options)
      @clients = {}
    end

    # @param groups [Hash{String => Array<Allocator::Item>}] peer URL => the items it owns
    # @return [Hash{String => Array<Result>}] per peer, a result per item, in item order
    def call(groups)
      asked = groups.map { |url, items| [url, items, Weft.spawn(url, items, name: "ringpool fan-out") { |u, i| ask(u, i) }] }
      asked.to_h { |url, items, task| [url, collect(task, items)] }
    end

    # @return [Hash{String => Hash}] per peer URL: connections opened and requests sent, so far
    def statistics
      @clients.to_h do |url, client|
        counts = client.statistics.values.first || {}
        [url, { "connections_opened" => counts.fetch(:created, 0), "requests" => counts.fetch(:checkouts, 0) }]
      end
    end

    # Closes every peer connection.
    # @return [void]
    def close
      @clients.each_value(&:close)
      @clients.clear
    end

    private

    def ask(url, items)
      body = +'{"items":['
      items.each_with_index do |item, index|
        body << "," unless index.zero?
        body << "{\"ring_pool\":#{item.pool.id},\"params\":#{item.params}}"
      end
      body << "]}"
      headers = { "content-type" => "application/json" }
      remaining = Weft.remaining
      headers[DEADLINE_HEADER] = format("%.6f", remaining) if remaining
      response = client(url).post(PATH, body: body, headers: headers)
      read(response, items)
    rescue StandardError
      fallback(items)
    end

    # A peer's answer, item by item; anything malformed becomes a fallback.
    def read(response, items)
      return fallback(items) unless response.status == 200
      results = JSON.parse(response.body.force_encoding(Encoding::UTF_8))["results"]
      return fallback(items) unless results.is_a?(Array) && results.size == items.size
      items.each_with_index.map do |item, index|
        result = Result.from_h(results[index])
        result && result.ring_pool == item.pool.id ? result : Result.overflow(item.pool, "shard_unavailable")
      end
    end

    def collect(task, items)
      task.wait || fallback(items)
    rescue Weft::DeadlineExceeded
      # Raised once, here and in the task at the same moment; the task answers with the fallback.
      retry
    end

    def fallback(items)
      items.map { |item| Result.overflow(item.pool, "shard_unavailable") }
    end

    def client(url)
      @clients[url] ||= Weft::HTTP::Client.new(url, **@client_options)
    end
  end
end
