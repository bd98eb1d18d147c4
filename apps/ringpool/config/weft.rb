# frozen_string_literal: true

# `weft serve -C apps/ringpool/config/weft.rb`: one shard per worker.
#
#   RINGPOOL_BIND      public listener (default tcp://127.0.0.1:9393)
#   RINGPOOL_SHARDS    workers, i.e. shards (default: one per CPU)
#   RINGPOOL_WARMUP    0: no warm-up in the master; "database": read-only statements as well
#   and the settings of Ringpool::Settings (DATABASE_URL, RINGPOOL_SOCKET_DIR...).
require_relative "../lib/ringpool"

rackup File.expand_path("../config.ru", __dir__)
bind ENV.fetch("RINGPOOL_BIND", "tcp://127.0.0.1:9393")
workers Integer(ENV.fetch("RINGPOOL_SHARDS", Etc.nprocessors.to_s))
# Requests wait on PostgreSQL and on other shards, never long: short keep-alive idle times suit
# a load balancer in front.
idle_timeout 30

# The shard (config.ru) is built in the master, which warms the request path before it forks
# (Shard#warm_up: a few hundred requests through Weft's server and the API, neither PostgreSQL
# nor a peer involved), so that on Ruby 3.3 + YJIT every shard, a
# replacement of a killed one included, starts with that code compiled instead of compiling it
# while it serves (bench/results/ringpool-notes.md, "YJIT in replacement workers").
preload true
unless ENV["RINGPOOL_WARMUP"] == "0"
  warmup { |warm| Ringpool.shard.warm_up(warm, database: ENV["RINGPOOL_WARMUP"] == "database") }
end

# Each worker is a shard: its identity (and the unix socket other shards reach it at) comes from
# its index, inside the worker's own reactor.
worker_task do |server|
  shard = Ringpool.shard or raise "config.ru did not set Ringpool.shard"
  index = server.worker_index || 0
  # RINGPOOL_SHARD_PORT=N: shard i also serves the public API on 127.0.0.1:N+i, so that a front
  # proxy can send each request to a shard of its choice and away from one that stalls (the
  # shared listener above leaves the choice to the kernel, which cannot tell a stopped process).
  if (base = ENV["RINGPOOL_SHARD_PORT"])
    own = Weft::Server.new(shard.api, binds: ["tcp://127.0.0.1:#{Integer(base) + index}"], shutdown_timeout: 5)
    Weft.spawn(detached: true, name: "ringpool shard's own public listener") { own.run }
  end
  begin
    shard.run(shard.settings.shard_url(index))
  ensure
    own&.stop # its requests in flight finish, as the shared listener's do
  end
end
