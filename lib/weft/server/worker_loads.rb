# frozen_string_literal: true

require_relative "../shared_counters"

module Weft
  class Server
    # Each worker's load, in memory the master shares with its workers (Weft::SharedCounters),
    # so that a worker about to accept a connection can see at once, with no system call,
    # whether a sibling holds fewer connections (AcceptSpread).
    #
    # The master makes the table before its first fork and gives each worker a slot of its own
    # before forking it (#claim), cleared once that worker has exited (#release). A slot belongs
    # to one worker process: a worker and its replacement in a phased restart, which share an
    # index, have one each. In its slot a worker writes its pid and whether it is accepting
    # (#open, #close), its open connections and how many it has accepted (#publish); its
    # siblings only read. Statistics::Board, the JSON files behind /stats, is the wrong place
    # for this: written once a second, read with a file system call per worker.
    #
    #   loads = WorkerLoads.new(2048)             # master, before forking
    #   slot = loads.claim                        # master, for each worker, before its fork
    #   loads.open(slot, Process.pid)             # the worker, when it starts accepting
    #   loads.publish(slot, 12, accepted: true)   # the worker, as connections open and close
    #   loads.connections(other)                  # any worker, of a sibling's slot
    #   loads.release(slot)                       # master, once the worker is reaped
    #
    # After a hot restart the new master makes a table of its own: the old workers, until they
    # stop, see only each other, and the new ones only each other.
    class WorkerLoads
      # Cells per slot: one cache line of 8-byte cells, so that a worker's writes never
      # invalidate the line a sibling's slot is on.
      STRIDE = 8
      # Where in a slot each figure is.
      PID = 0
      ACCEPTING = 1
      CONNECTIONS = 2
      ACCEPTED = 3
      # Cell 0 holds how many slots were ever claimed: readers look at those only.
      CLAIMED = 0

      # @return [Integer] how many slots the table has
      attr_reader :capacity

      # @param capacity [Integer] slots: at most this many workers alive at once take part
      def initialize(capacity)
        @capacity = capacity
        @cells = SharedCounters.new(STRIDE * (capacity + 1))
        @claimed = [] # master only: slots in use
      end

      # --- In the master ------------------------------------------------------------------

      # A cleared slot for a worker about to be forked.
      # @return [Integer, nil] nil when every slot is taken (the worker then does not take part)
      def claim
        slot = (0...@capacity).find { |index| !@claimed.include?(index) }
        return nil unless slot
        clear(slot)
        @claimed << slot
        @cells[CLAIMED] = slot + 1 if slot >= @cells[CLAIMED]
        slot
      end

      # The worker of the slot has exited: siblings stop considering it, and the slot is free.
      # @param slot [Integer]
      def release(slot)
        clear(slot)
        @claimed.delete(slot)
      end

      # --- In a worker --------------------------------------------------------------------

      # The worker accepts connections from now on.
      # @param slot [Integer] its own
      # @param pid [Integer] its process id
      def open(slot, pid)
        @cells[base(slot) + PID] = pid
        @cells[base(slot) + ACCEPTING] = 1
      end

      # The worker accepts no more (it is stopping): siblings must not leave connections to it.
      # @param slot [Integer] its own
      def close(slot)
        @cells[base(slot) + ACCEPTING] = 0
      end

      # @param slot [Integer] its own
      # @param connections [Integer] open now
      # @param accepted [Boolean] whether one was just accepted (counted, see #accepted)
      def publish(slot, connections, accepted: false)
        @cells[base(slot) + CONNECTIONS] = connections
        @cells.add(base(slot) + ACCEPTED, 1) if accepted
      end

      # @return [Integer] slots to look at: 0...slots (some may be free: not #accepting?)
      def slots
        @cells[CLAIMED]
      end

      # @param slot [Integer]
      # @return [Boolean] whether a live worker accepts connections in that slot
      def accepting?(slot)
        @cells[base(slot) + ACCEPTING] == 1
      end

      # @return [Integer] the pid of the slot's worker, 0 before it opened
      def pid(slot)
        @cells[base(slot) + PID]
      end

      # @return [Integer] the slot's worker's open connections
      def connections(slot)
        @cells[base(slot) + CONNECTIONS]
      end

      # @return [Integer] connections the slot's worker has accepted so far: when it moves, the
      #   worker is taking connections
      def accepted(slot)
        @cells[base(slot) + ACCEPTED]
      end

      private

      def base(slot)
        STRIDE * (slot + 1)
      end

      def clear(slot)
        STRIDE.times { |offset| @cells[base(slot) + offset] = 0 }
      end
    end
  end
end
