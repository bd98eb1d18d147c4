# frozen_string_literal: true

require "weft"
require "weft/postgres"
require "weft/http"
require "weft/server"

# Ringpool: call-tracking phone numbers handed out from ring pools, sharded over processes that
# route to each other. See apps/ringpool/README.md.
module Ringpool
  class << self
    # The shard of this process, set by config.ru and run by config/weft.rb's worker_task.
    # One per process, but passed in explicitly (not built on first use), so tests and other
    # servers can make their own.
    # @return [Shard, nil]
    attr_accessor :shard
  end
end

require_relative "ringpool/e164"
require_relative "ringpool/clock"
require_relative "ringpool/ring_pool"
require_relative "ringpool/number_queue"
require_relative "ringpool/pool_state"
require_relative "ringpool/result"
require_relative "ringpool/schema"
require_relative "ringpool/store"
require_relative "ringpool/catalog"
require_relative "ringpool/overflow_counter"
require_relative "ringpool/group_commit"
require_relative "ringpool/allocator"
require_relative "ringpool/ownership"
require_relative "ringpool/fan_out"
require_relative "ringpool/metrics"
require_relative "ringpool/dashboard"
require_relative "ringpool/validation"
require_relative "ringpool/settings"
require_relative "ringpool/api"
require_relative "ringpool/peer_api"
require_relative "ringpool/shard"
require_relative "ringpool/shard_slot"
require_relative "ringpool/reactor_thread"
