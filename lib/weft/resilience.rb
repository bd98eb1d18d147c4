# frozen_string_literal: true

# Weft's resilience layer, loaded on demand (`require "weft/resilience"`). See docs/resilience.md.
require_relative "../weft"
require_relative "resilience/scatter"
require_relative "resilience/hedge"
require_relative "resilience/retry_budget"
require_relative "resilience/retry"
