# frozen_string_literal: true

require "json"
require_relative "validation"

module Ringpool
  # The Rack app on a shard's own unix socket, for the other shards only:
  #
  #   POST /shard/allocations   {"items": [{"ring_pool": ID, "params": {...}}, ...]}
  #                             => {"results": [...]}, one per item, in order
  #   GET  /health              this shard's health (the public one answers for whichever
  #                             worker took the connection)
  #   GET  /shard/report        its health and Metrics#snapshot, for the dashboard
  #
  # Items must be of pools this shard owns; the others answer `{"not_owner": true}` (ownership
  # moved since the caller's last tick) and the caller looks the owner up again and asks it,
  # once, handing out the overflow number if that fails too. The
  # caller's remaining time arrives in the `ringpool-deadline` header (FanOut::DEADLINE_HEADER).
  class PeerAPI
    HEADERS = { "content-type" => "application/json" }.freeze
    DEADLINE_ENV = "HTTP_#{FanOut::DEADLINE_HEADER.upcase.tr('-', '_')}"

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
      document = Validation.parse_json(env["rack.input"].read(API::MAX_ALLOCATIONS_BODY + 1).to_s)
      items = document.is_a?(Hash) && document["items"]
      raise Validation::Invalid.new(422, "invalid_request", '"items" must be an array') unless items.is_a?(Array)
      entries = items.map { |item| Validation.allocation_item(item) }
      results = @shard.allocate_owned(entries, deadline(env))
      [200, HEADERS.dup, [JSON.generate({ "results" => results.map(&:to_h) })]]
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
