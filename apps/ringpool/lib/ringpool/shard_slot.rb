# frozen_string_literal: true

require "fileutils"

module Ringpool
  # Which shard this process is, under servers that do not number their workers for the app
  # (Puma, Falcon): the lowest index whose lock file in the socket folder no live process holds.
  # The lock (flock) lasts as long as the process, so a replaced worker takes over the index — and
  # with it the URL — of the one that died, as `weft serve` workers do by their worker index.
  module ShardSlot
    # @param dir [String] the shards' socket folder
    # @param limit [Integer] indexes tried
    # @return [Integer] the index claimed (held until the process exits)
    # @raise [RuntimeError] when every index up to limit is taken
    def self.claim(dir, limit: 256)
      FileUtils.mkdir_p(dir)
      limit.times do |index|
        file = File.new(File.join(dir, "shard-#{index}.lock"), File::RDWR | File::CREAT, 0o600)
        if file.flock(File::LOCK_EX | File::LOCK_NB)
          (@held ||= []) << file # kept open: closing it would release the lock
          return index
        end
        file.close
      end
      raise "ringpool: no free shard index below #{limit} in #{dir}"
    end
  end
end
