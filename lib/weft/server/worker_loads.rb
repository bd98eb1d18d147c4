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
    # The master also keeps, in the table, the list of the slots claimed now (#live,
    # #live_slot): a worker looks at every sibling before each accept, and that look must cost
    # what the workers alive cost, not what the most there ever were did. (It scanned up to the
    # highest slot ever claimed: after TTIN to 64 workers and TTOU back to 2, 64 slots per
    # accept, for good.) Claimed slots are listed in no particular order; a release moves the
    # last entry into the freed place. Only the master writes the list; a worker reading it
    # while it changes may see a slot twice, or, for a moment, not see one just claimed (the
    # cells are not ordered with each other): harmless for a hint, and a freed slot it still
    # sees is cleared, so not accepting.
    #
    #   loads = WorkerLoads.new(2048)             # master, before forking
    #   slot = loads.claim                        # master, for each worker, before its fork
    #   loads.open(slot, Process.pid)             # the worker, when it starts accepting
    #   loads.publish(slot, 12, accepted: true)   # the worker, as connections open and close
    #   loads.live.times { |i| loads.live_slot(i) } # any worker: the slots claimed now
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
      # Cell 0 holds how many slots are claimed now; the list of them starts on the next line.
      LIVE = 0
      LIST = STRIDE

      # @return [Integer] how many slots the table has
      attr_reader :capacity

      # @param capacity [Integer] slots: at most this many workers alive at once take part
      def initialize(capacity)
        @capacity = capacity
        # The header line, the list rounded up to whole lines, then a line per slot.
        @slots_at = LIST + ((capacity + STRIDE - 1) / STRIDE) * STRIDE
        @cells = SharedCounters.new(@slots_at + STRIDE * capacity)
        @claimed = [] # master only: the slots in use, in the order of the shared list
        @free = (0...capacity).to_a # master only: the free slots, lowest first
      end

      # --- In the master ------------------------------------------------------------------

      # A cleared slot for a worker about to be forked: the lowest free one.
      # @return [Integer, nil] nil when every slot is taken (the worker then does not take part)
      def claim
        slot = @free.shift
        return nil unless slot
        clear(slot)
        @cells[LIST + @claimed.size] = slot # listed before it is counted
        @claimed << slot
        @cells[LIVE] = @claimed.size
        slot
      end

      # The worker of the slot has exited: siblings stop considering it, and the slot is free.
      # @param slot [Integer]
      def release(slot)
        index = @claimed.index(slot)
        return unless index
        clear(slot)
        last = @claimed.pop
        unless last == slot
          # The last entry moves into the freed place before the count shrinks: a reader
          # counting the old length still finds it at its old place, which keeps it until then.
          @claimed[index] = last
          @cells[LIST + index] = last
        end
        @cells[LIVE] = @claimed.size
        @free.insert(@free.bsearch_index { |free| free > slot } || @free.size, slot)
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

      # @return [Integer] how many slots are claimed now: #live_slot(0...live) names them
      def live
        @cells[LIVE]
      end

      # @param index [Integer] 0...#live
      # @return [Integer] a claimed slot (its worker may not be accepting yet, or any more)
      def live_slot(index)
        @cells[LIST + index]
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
        @slots_at + STRIDE * slot
      end

      def clear(slot)
        STRIDE.times { |offset| @cells[base(slot) + offset] = 0 }
      end
    end
  end
end
