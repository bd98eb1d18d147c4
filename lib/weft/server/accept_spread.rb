# frozen_string_literal: true

require_relative "worker_loads"

module Weft
  class Server
    # Spreads new connections over the workers of a cluster that share one listening socket
    # (`spread_connections`, on by default): a worker holding noticeably more open connections
    # than its least loaded sibling leaves a queued connection to that sibling for a moment
    # before taking it itself.
    #
    # Without it the kernel wakes every worker for a new connection and the first to call
    # accept takes it, with whatever else is queued: keep-alive clients pile onto whichever
    # worker happens to run first (a burst of 64 split 45/21; after a restart the surviving
    # worker kept nearly all of them), and a cluster behind a load balancer with persistent
    # connections used one core. SO_REUSEPORT spreads them by hash, but loses the connections
    # queued on a stopping worker's socket (docs/server.md, Processes).
    #
    # The rule, checked before each accept (WorkerLoads holds every worker's figures):
    #
    # - a worker noticeably above its least loaded sibling (one that is accepting, and trusted,
    #   see below) — at least MARGIN open connections more, and TOLERANCE more in proportion —
    #   does not take the connection at once: it leaves it to the sibling, woken by the same
    #   connection, looking every POLL whether the sibling has accepted one, for up to DELAY
    #   (its own connections are served meanwhile); then it accepts what is still queued. So
    #   no connection waits more than DELAY for a heavier worker, whatever the siblings do;
    # - a sibling that took nothing while it was waited for (it is stopped, stuck, busy in a
    #   long reactor turn, or gone) is not waited for again until it accepts a connection of its
    #   own accord (its accepted count moves) or RETRY has passed: a sibling under SIGSTOP costs
    #   its peers one DELAY a RETRY, not one per connection. The RETRY is needed: the kernel
    #   wakes the workers in the same order each time, so a sibling that is not waited for may
    #   never be the first to accept (without RETRY a continued worker got 0 of 30 new
    #   connections in two runs of three);
    # - a worker with no sibling, or at most MARGIN - 1 above every one (an idle worker, the
    #   single process of `-w 0`, which has no AcceptSpread at all), accepts at once, greedily,
    #   as without it;
    # - a worker at max_connections waits the same way for any sibling with fewer connections
    #   (every worker has the same max_connections, so that one has room) before it closes one
    #   of its idle keep-alive connections to make room (Server#make_room): that would cost
    #   its client a reconnection for nothing.
    #
    # Connections rather than requests in flight: a keep-alive connection stays with the worker
    # that accepted it, so it is the count of connections that decides how the work is shared
    # from then on. A worker's count goes up as it accepts, so a burst is shared as it arrives:
    # the two take turns, each accepting until it is noticeably above the other, and the
    # proportional TOLERANCE keeps the turns few in a large burst (each turn costs up to POLL).
    # The count includes the connections the application took over (rack.hijack, streaming
    # bodies: WebSockets, event streams) until it closes them: a worker holding thousands of
    # them holds their descriptors and memory, and must not look empty (ConnectionHost,
    # HijackedSockets).
    class AcceptSpread
      # Open connections above the least loaded sibling from which a worker leaves new ones to
      # it. 2 rather than 1 (reasoned, not compared by measurement): with short connections (one
      # request each) a worker is often one above its sibling for the time of a request.
      MARGIN = 2
      # ...and the fraction of the sibling's connections it must be above by (reasoned too), so
      # that two workers sharing a burst of hundreds take turns of many connections, not of 2.
      TOLERANCE = 0.25
      # Seconds a heavier worker leaves a queued connection to a lighter sibling at most. Puma's
      # wait_for_less_busy_worker waits 5 ms; here 5 ms was too short for a busy machine, where
      # a sibling that is ready to run can wait that long for a CPU: a fresh cluster on Ruby 3.3
      # + YJIT, 64 connections opened at once by a client on the same 2 cores, split 4-6 / 58-60
      # in 4 runs of 4 (the sibling did not run for more than 13 ms after its last accept);
      # with 20 ms, and 50 ms, each worker got at least 16 in 4 of 4. The wait ends as soon as
      # the sibling accepts a connection, so a responsive sibling costs no connection any of it.
      DELAY = 0.02
      # Seconds between two looks, meanwhile, at whether the sibling has caught up.
      POLL = 0.0005
      # Seconds a sibling that took nothing in a DELAY is not waited for (unless it accepts).
      RETRY = 1.0

      # @return [Integer] times this worker left a queued connection to a lighter sibling
      attr_reader :deferred

      # @param loads [WorkerLoads] shared with the master and the siblings
      # @param slot [Integer] this worker's slot in it
      def initialize(loads, slot)
        @loads = loads
        @slot = slot
        @deferred = 0
        @connections = 0
        # slot => [pid, accepted, until] of a sibling that took nothing while waited for: not
        # waited for again while its pid and accepted count stay the same, until then.
        @distrusted = {}
      end

      # Starts taking part: siblings may now leave connections to this worker.
      def start
        @loads.publish(@slot, @connections)
        @loads.open(@slot, Process.pid)
      end

      # This worker accepts no more (a graceful stop): siblings stop leaving connections to it.
      def stop
        @loads.close(@slot)
      end

      # A connection was accepted. @param connections [Integer] open now
      def opened(connections)
        @connections = connections
        @loads.publish(@slot, connections, accepted: true)
      end

      # A connection closed (a hijacked one included: ConnectionHost counts those until the
      # application closes them). @param connections [Integer] open now
      def closed(connections)
        @connections = connections
        @loads.publish(@slot, connections)
      end

      # @param full [Boolean] this worker is at max_connections: any sibling with fewer
      #   connections will do, however few fewer
      # @return [Integer, nil] the slot of the least loaded sibling still waited for (see
      #   #defer), when this worker is noticeably above it (MARGIN, TOLERANCE); nil when this
      #   worker should accept now
      def lighter_sibling(full = false)
        limit = @connections - (full ? 1 : MARGIN)
        return nil if limit.negative?
        unless full
          proportional = (@connections / (1 + TOLERANCE)).floor
          limit = proportional if proportional < limit
        end
        lightest = nil
        # The slots claimed now, not every slot ever claimed: the look costs what the workers
        # alive do (WorkerLoads#live).
        index = 0
        live = @loads.live
        while index < live
          slot = @loads.live_slot(index)
          if slot != @slot && @loads.accepting?(slot)
            count = @loads.connections(slot)
            if count <= limit && !distrusted?(slot)
              lightest = slot
              limit = count
            end
          end
          index += 1
        end
        lightest
      end

      # Called when a connection is queued, before accepting it: a worker with a lighter
      # sibling waits until that sibling has accepted a connection (the one queued, likely), or
      # this worker is no longer noticeably above any, or DELAY passed; then it goes on to
      # accept (nothing, if the queue is empty by then). A sibling that took nothing in all
      # that time is not waited for again until it accepts something.
      # @param full [Boolean] this worker is at max_connections (see #lighter_sibling)
      # @return [Boolean] whether it waited
      def defer(full: false)
        sibling = lighter_sibling(full)
        return false unless sibling
        pid = @loads.pid(sibling)
        accepted = @loads.accepted(sibling)
        @deferred += 1
        deadline = Timers.now + DELAY
        loop do
          sleep(POLL)
          return true if @loads.accepted(sibling) != accepted || !lighter_sibling(full)
          break if Timers.now >= deadline
        end
        @distrusted[sibling] = [pid, accepted, Timers.now + RETRY] if @loads.pid(sibling) == pid
        true
      end

      private

      def distrusted?(slot)
        pid, accepted, till = @distrusted[slot]
        return false unless pid
        return true if @loads.pid(slot) == pid && @loads.accepted(slot) == accepted && Timers.now < till
        @distrusted.delete(slot) # it accepted since, it is another worker's slot now, or time is up
        false
      end
    end
  end
end
