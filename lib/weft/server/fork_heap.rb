# frozen_string_literal: true

module Weft
  class Server
    # Makes the master's heap ready to be inherited by a forked worker: fully collected and
    # swept, and with room for the worker to grow in without a major GC.
    #
    # Room, because Ruby sizes its heap at a major GC for the process that ran it: it grows the
    # heap only when fewer than 20% of the slots are left free (RUBY_GC_HEAP_FREE_SLOTS_MIN_RATIO),
    # and a heap the master's full GC left, say, 27% free is not grown. A worker inherits that
    # heap with the master's live objects and then adds its own (connections, caches, the app's
    # state, objects of requests in flight that live long enough to be promoted): once a minor
    # GC finds under 20% free, and three GCs have run since the last major one, Ruby runs a
    # major GC (`major_by: :nofree`), finds the heap barely over 20% free again, does not grow
    # it, and repeats. Measured in apps/ringpool's chaos run (Ruby 3.1, 4 shards, 90 requests/s,
    # a kill a second, two runs): the master left 68,000 live objects in 93,160 slots; 7-8 of
    # the 27 replacement workers ran 20-23 major GCs by :nofree, the first 1.3-5.8 s after the
    # fork, up to three in 5 s, until one finally grew the heap to ~125,000 slots. Grown to 0.4
    # free (113,590 slots): 1 and 0 (bench/results/ringpool-notes.md, 2026-12-06).
    #
    # So when the master's heap has less than `free` of its slots free after the full GC, it is
    # grown to that: filler objects are allocated with the GC disabled (the heap gets the new
    # pages a disabled GC asks for), dropped, and collected by a second full GC, which leaves the
    # slots free on the master's pages. Each worker then inherits the room a heap grown by
    # Ruby's own GC would have (RUBY_GC_HEAP_FREE_SLOTS_GOAL_RATIO, 0.4), grown once in the
    # master instead of by a major GC in every worker. Ruby gives back pages beyond
    # RUBY_GC_HEAP_FREE_SLOTS_MAX_RATIO (0.65) free at the next GC, hence the setting's bound.
    # On Ruby 3.2+ each size pool (40, 80, 160, 320, 640-byte slots) is a heap of its own with
    # its own ratio, and is grown on its own; Ruby 3.3 already regrows a pool to 40% free at a
    # full GC that finds it under 20%, so there less is grown and fewer major GCs are saved
    # (docs/server.md, "Room to grow in").
    module ForkHeap
      # Largest `free` that outlasts the next GC (RUBY_GC_HEAP_FREE_SLOTS_MAX_RATIO's default).
      MAX_FREE = 0.65
      # A few pages' worth of slots missing is not worth a second GC.
      MIN_GROWTH = 2_000
      # The fillers' template: `NIL * n` allocates one array of n nils, embedded.
      NIL = [nil].freeze

      # One size pool (Ruby 3.2+) or the whole heap (3.1) after the full GC.
      Pool = Struct.new(:slot_size, :slots, :live) do
        # @return [Integer] slots to add for `free` of them to be free
        def missing(free)
          (live / (1.0 - free)).ceil - slots
        end
      end

      class << self
        # Collects the whole heap and, with `free`, grows it to have that fraction of its slots
        # free. Call it in the master just before fork.
        # @param free [Float, nil] fraction of slots to leave free (at most MAX_FREE); 0 or nil: only collect
        # @return [Hash] :before and :after ([Pool] per size pool), :grown (slots added), :seconds
        def settle(free: nil)
          started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
          GC.start
          before = pools
          grown = free ? grow(before, free) : 0
          GC.start if grown.positive? # collects the fillers: their slots free on the master's pages
          { before: before, after: grown.positive? ? pools : before, grown: grown,
            seconds: Process.clock_gettime(Process::CLOCK_MONOTONIC) - started }
        end

        # Slots count the pages Ruby has decided to add but not yet allocated (a GC that grows the
        # heap only allows it more pages, allocated as they are needed): room as much as free slots.
        # @return [Array<Pool>] the heap's size pools as they are now (exact just after a full GC)
        def pools
          page_size = GC::INTERNAL_CONSTANTS[:HEAP_PAGE_SIZE]
          unless GC.respond_to?(:stat_heap) # Ruby 3.1: one heap of 40-byte slots
            stat = GC.stat
            pending = stat[:heap_allocatable_pages] * GC::INTERNAL_CONSTANTS[:HEAP_PAGE_OBJ_LIMIT]
            return [Pool.new(GC::INTERNAL_CONSTANTS[:RVALUE_SIZE], stat[:heap_available_slots] + pending, stat[:heap_live_slots])]
          end
          GC.stat_heap.values.map do |heap|
            pending = heap[:heap_allocatable_pages] * (page_size / heap[:slot_size])
            Pool.new(heap[:slot_size], heap[:heap_eden_slots] + pending, heap[:total_allocated_objects] - heap[:total_freed_objects])
          end
        end

        private

        # Allocates, with the GC off, enough fillers of each pool's size to fill its free slots
        # and the slots it lacks. @return [Integer] slots added in all
        def grow(pools, free)
          short = pools.select { |pool| pool.missing(free) >= MIN_GROWTH }
          return 0 if short.empty?
          was_disabled = GC.disable
          begin
            short.each { |pool| fill(pool.slot_size, pool.slots - pool.live + pool.missing(free)) }
          ensure
            GC.enable unless was_disabled
          end
          short.sum { |pool| pool.missing(free) }
        end

        # `count` objects in slots of `slot_size` bytes: arrays embedding as many elements as the
        # slot holds (16 bytes of header, 8 per element), which Ruby 3.2+ puts in that size pool
        # (Array.new would not: it allocates an empty array, then mallocs its elements). With the
        # GC off, none is collected, kept or not: they fill the pool's free slots, then new pages.
        def fill(slot_size, count)
          length = (slot_size - 16) / 8
          count.times { NIL * length }
        end
      end
    end
  end
end
