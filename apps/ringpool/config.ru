# frozen_string_literal: true

# The public API of one shard. Run it with `weft serve -C config/weft.rb` (which also gives each
# worker its shard identity and peer socket); see README.md.
require_relative "lib/ringpool"

Ringpool.shard = Ringpool::Shard.new(Ringpool::Settings.from_env)
run Ringpool.shard.api
