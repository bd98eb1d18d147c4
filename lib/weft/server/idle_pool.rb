# frozen_string_literal: true

require_relative "idle_pool/epoll_strategy"
require_relative "idle_pool/portable_strategy"

module Weft
  class Server
    # Holds idle connections (kept alive between requests, or accepted but silent) without a
    # fiber each: the issue requires that an idle keep-alive connection holds no fiber, and a
    # parked fiber costs ~13 KB of RSS (measured: +120 MB for 9,000), far over the budget of
    # 64 MB for 10,000 idle connections.
    #
    # The pool keeps the bookkeeping (oldest first, an idle timer each, reclaim, release,
    # expiry); how a parked socket's readability is noticed is its strategy's job, picked once:
    # EpollStrategy (Weft::Readiness, one fiber for all of them) where epoll exists, else
    # PortableStrategy (a task per parked connection: correct, but it holds a fiber each).
    #
    # What the pool needs of a parked connection: #to_io (the socket to watch), #resume (in a
    # task, once readable), #pending_input? (whether bytes arrived; must not block),
    # #idle_expired (from the loop fiber when its timer fires; must not block) and #close.
    class IdlePool
      # @return [Class] the strategy for this platform: EpollStrategy where Weft::Readiness is
      #   available (Linux), else PortableStrategy
      def self.default_strategy
        Weft::Readiness.available? ? EpollStrategy : PortableStrategy
      end

      # @param strategy [Class] how parked sockets are watched (see IdlePool.default_strategy)
      # @param on_ready [#call] called with a connection whose socket became readable; it must
      #   start a task that calls connection.resume
      def initialize(strategy: IdlePool.default_strategy, &on_ready)
        @on_ready = on_ready
        @parked = {}.compare_by_identity # connection => its idle timer, oldest first
        @strategy = strategy.new { |connection| readable(connection) }
      end

      # @return [Integer] connections parked right now
      def size
        @parked.size
      end

      # @return [Class] the strategy in use
      def strategy
        @strategy.class
      end

      # Starts watching. Call inside the server's reactor, in the process that serves: what
      # the strategy opens (an epoll instance) belongs to the process that opens it, so a
      # pool made before a fork works in the child.
      def start
        @strategy.start
      end

      # Parks a connection until its socket is readable (-> on_ready) or `timeout` seconds
      # pass (-> connection.idle_expired in the loop fiber).
      def park(connection, timeout)
        @strategy.watch(connection)
        @parked[connection] = Weft.scheduler.timers.after(timeout) { expire(connection) }
      end

      # Closes the connection parked longest, to make room for a new one (max_connections).
      # A parked connection whose next request arrived meanwhile is not idle: it is handed back
      # (on_ready) to be served, and the next oldest is tried.
      # @return [Boolean] whether a connection was closed
      def reclaim_oldest
        loop do
          connection = @parked.first&.first or return false
          take(connection)
          if connection.pending_input?
            @on_ready.call(connection)
          else
            connection.close
            return true
          end
        end
      end

      # Takes a connection out of the pool, if it is parked: its timer cancelled, its socket
      # unwatched. The caller closes or serves it.
      # @return [Boolean] whether it was parked
      def remove(connection)
        return false unless @parked.key?(connection)
        take(connection)
        true
      end

      # Hands back (on_ready) every parked connection for which the block is true, to serve a
      # request that already arrived or to close. Closing them here instead would reset a
      # connection whose request is in the socket buffer but not yet seen by the strategy.
      def release
        selected = @parked.each_key.select { |connection| yield(connection) }
        selected.each { |connection| @on_ready.call(take(connection)) }
      end

      # Stops watching (graceful stop): every parked connection is handed back (#release).
      def stop
        release { true }
        @strategy.stop
      end

      private

      # Removes a parked connection from the pool: its timer cancelled, its socket unwatched.
      # @return [Object] the connection
      def take(connection)
        @parked.delete(connection).cancel
        @strategy.unwatch(connection)
        connection
      end

      # The strategy saw the socket readable (or hung up).
      def readable(connection)
        timer = @parked.delete(connection) or return
        timer.cancel
        @on_ready.call(connection)
      end

      # The idle timer fired (in the loop fiber). Timers fire after the reactor's poll, and the
      # poll may have run fibers for a while (io-event resumes fibers waiting on I/O from
      # inside it): a request that arrived meanwhile is in the socket, not yet seen by the
      # strategy. Such a connection stays parked: its readiness is pending, so the strategy
      # hands it over on the next turn, instead of it being reset here.
      def expire(connection)
        return unless @parked.key?(connection)
        return if connection.pending_input?
        take(connection)
        connection.idle_expired
      end
    end
  end
end
