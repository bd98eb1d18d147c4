# frozen_string_literal: true

require "weft"
require "weft/postgres"
require "weft/http"

# Ringpool: call-tracking phone numbers handed out from ring pools, sharded over processes.
# See apps/ringpool/README.md.
module Ringpool
end

require_relative "ringpool/e164"
require_relative "ringpool/clock"
require_relative "ringpool/ring_pool"
require_relative "ringpool/number_queue"
require_relative "ringpool/pool_state"
require_relative "ringpool/schema"
require_relative "ringpool/store"
