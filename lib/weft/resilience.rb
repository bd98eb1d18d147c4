# frozen_string_literal: true

# Weft's resilience layer, loaded on demand (`require "weft/resilience"`): guards that keep a
# slow or failing dependency from taking the whole service down with it, modelled on the
# ring-pool service of the seed talk, which asked every shard at once under a deadline, handed
# out an overflow number when a shard was slow and let traffic back to it gradually.
#
# * Weft.scatter asks many dependencies at once under one deadline and answers a late or failed
#   item from a fallback; Weft.hedge races a second attempt against a slow first one; Weft::Retry
#   retries transient failures with jittered backoff inside the deadline and a Weft::RetryBudget.
# * Weft::CircuitBreaker stops calling a dependency that fails or answers slowly, answers from a
#   fallback meanwhile, and ramps traffic back up instead of risking it all on one probe.
# * Weft::RateLimiter (token bucket) and Weft::Bulkhead (concurrency limit with a bounded queue)
#   bound the traffic sent to a dependency, standalone or inside a breaker.
#
# Each guard refuses a call without running it by raising a Weft::Rejected (or handing it to a
# fallback). Their waits are fiber-native inside a reactor and end at the caller's deadline.
# See docs/resilience.md. The server's statistics list every registered breaker once this file
# is loaded; the server itself never loads it.
require_relative "../weft"
require_relative "resilience/errors"
require_relative "resilience/wait"
require_relative "resilience/scatter"
require_relative "resilience/hedge"
require_relative "resilience/retry_budget"
require_relative "resilience/retry"
require_relative "resilience/rate_limiter"
require_relative "resilience/bulkhead"
require_relative "resilience/sliding_window"
require_relative "resilience/circuit_breaker"
require_relative "resilience/origin_breakers"
