# frozen_string_literal: true

module Ringpool
  # The GC settings ringpool's launchers (bench/ringpool/run, bin/demo) give the server they
  # start: environment variables, because Ruby reads them only as a process starts (the master
  # reads them; its workers inherit the heap it sized).
  #
  # Why (bench/results/ringpool-notes.md, 2026-12-07, apps/ringpool/bench/cpu_profile.rb): a
  # shard allocates ~1,200 objects per request, and on Ruby 3.3 a minor GC comes whenever any
  # one size pool runs out of free slots. Ruby gives each pool room in proportion to the objects
  # it holds, not to those allocated in it: the 160-byte pool (hashes, and strings of 64-135
  # bytes: the request's params, the INSERT's rows, the answers) holds ~10,000 objects and gets
  # a few thousand free slots, which ~250 objects a request fill every 20-25 requests. So a
  # shard ran a minor GC every ~20 requests, each sweeping a ~300,000-object heap (the pools'
  # numbers), ~20% of its CPU. A floor of 150,000 slots for that pool (24 MB at most per
  # shard) made minor GCs 2.5-5x rarer. Growing every pool after the shard has taken its pools
  # (Weft::Server::ForkHeap.settle in the worker, to 40% or 60% free) did not: room in
  # proportion to the objects held again. Ruby 3.1 has one heap, sized for everything at once.
  module GCEnvironment
    # Ruby 3.3: a floor for the 160-byte size pool (pools 0-4 are 40, 80, 160, 320, 640 bytes).
    SIZE_POOLS = { "RUBY_GC_HEAP_2_INIT_SLOTS" => "150000" }.freeze
    # Ruby 3.1: one heap of 40-byte slots, whose live objects are ~300,000 per shard.
    SINGLE_HEAP = { "RUBY_GC_HEAP_INIT_SLOTS" => "800000" }.freeze

    # @param env [Hash] the launcher's environment: a variable set there already wins, and
    #   RINGPOOL_GC_ROOM=0 leaves Ruby's defaults
    # @param ruby_version [String] of the Ruby that runs the server
    # @return [Hash{String => String}] the variables to add (none on Rubies not measured: 3.2, 3.4)
    def self.for(env = ENV, ruby_version: RUBY_VERSION)
      return {} if env["RINGPOOL_GC_ROOM"] == "0"
      settings = if ruby_version.start_with?("3.3.") then SIZE_POOLS
                 elsif ruby_version.start_with?("3.1.") then SINGLE_HEAP
                 else {}
                 end
      settings.reject { |name, _| env.key?(name) }
    end
  end
end
