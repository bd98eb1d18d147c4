# frozen_string_literal: true

# `puma -C apps/ringpool/config/puma.rb`: ringpool under Puma, one shard per worker (see
# any_server.ru). Same environment as config/weft.rb; PUMA_THREADS (default 32) threads per
# worker, each waiting on the shard's reactor while a request runs there: they only wait, so
# many are cheap, and few queue requests (bench/ringpool, 100 requests/s: 5 threads p50 105 ms
# with 5 s timeouts, 32 threads p50 6 ms).
require "etc"

rackup File.expand_path("any_server.ru", __dir__)
bind ENV.fetch("RINGPOOL_BIND", "tcp://127.0.0.1:9393")
workers Integer(ENV.fetch("RINGPOOL_SHARDS", Etc.nprocessors.to_s))
threads_count = Integer(ENV.fetch("PUMA_THREADS", "32"))
threads threads_count, threads_count
# The app is loaded in each worker after the fork: each claims its shard index there.
preload_app! false
