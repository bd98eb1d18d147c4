# frozen_string_literal: true

require "json"
require_relative "validation"

module Ringpool
  # The public Rack app: JSON over HTTP/1.1.
  #
  #   POST /ring_pools          create a pool                         201, 409 numbers taken, 422
  #   GET  /ring_pools/:id      a pool: numbers free/locked, counts   200, 404
  #   POST /allocations         1 to 1,000 items, answered in order   200 (per-item errors), 400, 413, 422
  #   GET  /attribution?number=E164&at=ISO8601   the params of the allocation covering `at`   200, 404, 422
  #   GET  /health              for a load balancer                   200
  #   GET  /                    the live dashboard (an HTML page)     200
  #   GET  /dashboard.json      its data: every shard's figures       200
  #
  # Bad input is refused before anything is stored; errors are `{"error": code, "message": ...}`.
  class API
    JSON_HEADERS = { "content-type" => "application/json" }.freeze
    # 1,000 items of the largest params fit in 4.5 MiB; anything larger is refused unread.
    MAX_ALLOCATIONS_BODY = 4_608 * 1_024
    MAX_POOL_BODY = 64 * 1_024
    POOL_PATH = %r{\A/ring_pools/([0-9]{1,10})\z}

    # @param shard [Shard]
    def initialize(shard)
      @shard = shard
    end

    # @return [Array] a Rack response
    def call(env)
      method = env["REQUEST_METHOD"]
      path = env["PATH_INFO"]
      case path
      when "/allocations" then only(method, "POST") { allocations(env) }
      when "/ring_pools" then only(method, "POST") { create_pool(env) }
      when POOL_PATH then only(method, "GET") { show_pool(Integer(Regexp.last_match(1), 10)) }
      when "/attribution" then only(method, "GET") { attribution(env) }
      when "/health" then only(method, "GET") { json(200, @shard.health) }
      when "/" then only(method, "GET") { [200, { "content-type" => "text/html; charset=utf-8" }, [Dashboard.page]] }
      when "/dashboard.json" then only(method, "GET") { json(200, @shard.dashboard) }
      else error(404, "not_found", "no route for #{path[0, 100]}")
      end
    rescue Validation::Invalid => e
      error(e.status, e.code, e.message)
    rescue *Allocator::STORAGE_ERRORS => e
      # Unreachable, restarting, or the schema not migrated yet (a shard migrates on its first
      # maintenance tick): try again later.
      error(503, "storage_unavailable", "PostgreSQL failed: #{e.class}: #{e.message.lines.first.to_s.strip[0, 200]}")
    end

    private

    # Timed from the handler's start to the JSON answer, for the dashboard.
    def allocations(env)
      started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      entries = Validation.allocation_batch(body(env, MAX_ALLOCATIONS_BODY))
      results = @shard.allocate(entries)
      answer = [200, JSON_HEADERS.dup, [%({"allocations":[#{results.map(&:public_json).join(',')}]})]]
      @shard.record(results, Process.clock_gettime(Process::CLOCK_MONOTONIC) - started)
      answer
    end

    def create_pool(env)
      spec = Validation.ring_pool(body(env, MAX_POOL_BODY))
      pool = @shard.create_pool(**spec)
      json(201, pool_json(pool.id))
    rescue Store::NumbersTaken => e
      error(409, "numbers_taken", e.message)
    end

    def show_pool(id)
      # Ten digits reach past PostgreSQL's integer: no pool has such an id.
      body = pool_json(id) if id <= Validation::MAX_POOL_ID
      body ? json(200, body) : error(404, "not_found", "no ring pool #{id}")
    end

    def pool_json(id)
      report = @shard.store.report(id) or return nil
      now = Clock.now
      numbers = report["numbers"].map do |number, free_at|
        { "number" => number, "free" => free_at <= now, "lockout_until" => free_at > now ? Clock.iso8601(free_at) : nil }
      end
      free = numbers.count { |number| number["free"] }
      {
        "id" => id, "name" => report["name"], "overflow_number" => report["overflow_number"],
        "lockout_seconds" => Integer(report["lockout_seconds"]), "owner" => @shard.owner(id),
        "numbers" => numbers, "free" => free, "locked" => numbers.size - free,
        "allocations" => Integer(report["allocations"]), "overflows" => JSON.parse(report["overflows"])
      }
    end

    def attribution(env)
      query = begin
        Rack::Utils.parse_query(env["QUERY_STRING"].to_s)
      rescue Rack::Utils::InvalidParameterError => e
        raise Validation::Invalid.new(400, "malformed_query", "the query string cannot be decoded: #{e.message[0, 100]}")
      end
      number = query["number"]
      unless E164.valid?(number)
        # A bare + in a query string reads as a space: the commonest way to get this wrong.
        raise Validation::Invalid.new(422, "invalid_number", "number must be E.164, e.g. +14155550123, written %2B14155550123 in a query string")
      end
      at = query["at"] ? Clock.parse(query["at"]) : Clock.now
      raise Validation::Invalid.new(422, "invalid_at", "at must be an ISO 8601 time with a zone") unless at
      found = @shard.store.attribution(number, at)
      return error(404, "not_found", "no tracked allocation of #{number} covers that time") unless found
      json(200, { "number" => number, "ring_pool" => found[:ring_pool], "params" => JSON.parse(found[:params]),
                  "locked_from" => Clock.iso8601(found[:locked_from]), "lockout_until" => Clock.iso8601(found[:locked_until]) })
    end

    def only(method, allowed)
      return yield if method == allowed
      [405, JSON_HEADERS.merge("allow" => allowed), [JSON.generate({ "error" => "method_not_allowed", "message" => "use #{allowed}" })]]
    end

    # Reads at most `limit` bytes of the body; more is a 413 (the rest is never parsed).
    def body(env, limit)
      input = env["rack.input"] or return ""
      data = input.read(limit + 1) || ""
      raise Validation::Invalid.new(413, "too_large", "the body is larger than #{limit} bytes") if data.bytesize > limit
      data
    end

    def json(status, object)
      [status, JSON_HEADERS.dup, [JSON.generate(object)]]
    end

    def error(status, code, message)
      json(status, { "error" => code, "message" => message })
    end
  end
end
