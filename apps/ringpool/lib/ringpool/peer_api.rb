# frozen_string_literal: true

require "json"
require_relative "validation"

module Ringpool
  # The Rack app on a shard's own unix socket, for the other shards only:
  #
  #   POST /shard/allocations   {"items": [[ID, {params}], ...]}
  #                             => {"results": [...]}, one per item, in order, each in
  #                             Result#to_peer's compact shape
  #   GET  /health              this shard's health (the public one answers for whichever
  #                             worker took the connection)
  #   GET  /shard/report        its health and Metrics#snapshot, for the dashboard
  #
  # The shape is compact (arrays, lockout ends in microseconds) because both ends are ringpool:
  # JSON objects and ISO 8601 times cost a shard more CPU than the rest of a peer call
  # (apps/ringpool/bench/cpu_profile.rb). For the same reason the params are not checked again
  # (Validation.peer_item): the shard that took the public request did; they are only turned
  # back into JSON text, which the INSERT takes as it is.
  #
  # Items must be of pools this shard owns; the others answer `"not_owner"` (ownership
  # moved since the caller's last tick) and the caller looks the owner up again and asks it,
  # once, handing out the overflow number if that fails too. The
  # caller's remaining time arrives in the `ringpool-deadline` header (FanOut::DEADLINE_HEADER).
  class PeerAPI
    HEADERS = { "content-type" => "application/json" }.freeze
    DEADLINE_ENV = "HTTP_#{FanOut::DEADLINE_HEADER.upcase.tr('-', '_')}"
    # The most of a body read: FanOut's batches stay within it.
    MAX_BODY = FanOut::MAX_BODY

    # @param shard [Shard]
    def initialize(shard)
      @shard = shard
    end

    # @return [Array] a Rack response
    def call(env)
      if env["REQUEST_METHOD"] == "GET"
        case env["PATH_INFO"]
        when "/health" then return [200, HEADERS.dup, [JSON.generate(@shard.health)]]
        when FanOut::REPORT_PATH then return [200, HEADERS.dup, [JSON.generate(@shard.report)]]
        end
      end
      unless env["REQUEST_METHOD"] == "POST" && env["PATH_INFO"] == FanOut::PATH
        return [404, HEADERS.dup, ['{"error":"not_found"}']]
      end
      document = Validation.parse_json(env["rack.input"].read(MAX_BODY + 1).to_s)
      items = document.is_a?(Hash) && document["items"]
      raise Validation::Invalid.new(422, "invalid_request", '"items" must be an array') unless items.is_a?(Array)
      entries = items.map { |item| Validation.peer_item(item) }
      results = @shard.allocate_owned(entries, deadline(env))
      [200, HEADERS.dup, [JSON.generate({ "results" => results.map(&:to_peer) })]]
    rescue Validation::Invalid => e
      [e.status, HEADERS.dup, [JSON.generate({ "error" => e.code, "message" => e.message })]]
    end

    private

    def deadline(env)
      seconds = Float(env[DEADLINE_ENV], exception: false)
      seconds if seconds&.finite? && seconds.positive?
    end
  end
end
