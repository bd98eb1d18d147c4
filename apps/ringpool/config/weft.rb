# frozen_string_literal: true

# `weft serve -C apps/ringpool/config/weft.rb`: one shard per worker.
#
#   RINGPOOL_BIND      public listener (default tcp://127.0.0.1:9393)
#   RINGPOOL_SHARDS    workers, i.e. shards (default: one per CPU)
#   and the settings of Ringpool::Settings (DATABASE_URL, RINGPOOL_SOCKET_DIR...).
require_relative "../lib/ringpool"

rackup File.expand_path("../config.ru", __dir__)
bind ENV.fetch("RINGPOOL_BIND", "tcp://127.0.0.1:9393")
workers Integer(ENV.fetch("RINGPOOL_SHARDS", Etc.nprocessors.to_s))
# Requests wait on PostgreSQL and on other shards, never long: short keep-alive idle times suit
# a load balancer in front.
idle_timeout 30

# Each worker is a shard: its identity (and the unix socket other shards reach it at) comes from
# its index, inside the worker's own reactor.
worker_task do |server|
  shard = Ringpool.shard or raise "config.ru did not set Ringpool.shard"
  shard.run(shard.settings.shard_url(server.worker_index || 0))
end
