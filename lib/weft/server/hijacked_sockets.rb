# frozen_string_literal: true

require_relative "../timers"

module Weft
  class Server
    # The sockets the application has taken over (a full `rack.hijack`, a partial hijack, a
    # streaming body) and not closed yet. The server no longer serves them, but each still
    # costs this process a file descriptor and memory, often for a long time (a WebSocket, a
    # server-sent event stream): so they count against `max_connections`, and in the load a
    # cluster worker publishes for spreading (AcceptSpread), until the application closes them.
    #
    # The application owns such a socket, so the server learns of its close in one of two ways:
    #
    # - through the server's own objects: a partial hijack or streaming body closed through its
    #   Server::Stream (Connection#close) is taken off at once (#remove);
    # - otherwise by looking (#sweep, every SWEEP_INTERVAL, from a task of the server): a full
    #   hijack's socket is a plain IO the application closes itself, and IO#close has no hook
    #   (Ruby's Fiber::Scheduler#io_close is not called by IO#close on 3.1 or 3.3). A socket is
    #   gone once it is closed, or once the application dropped it and the GC collected it
    #   (which closes its descriptor).
    #
    # The sockets are held weakly (ObjectSpace::WeakMap): holding them would keep a socket the
    # application dropped without closing from ever being collected, turning its leak of a
    # descriptor until the next GC into one for the life of the process.
    #
    #   hijacked = HijackedSockets.new
    #   token = hijacked.add(socket)   # Connection#detach, through ConnectionHost#hand_over
    #   hijacked.remove(token)         # => true once: closed through the server's Stream
    #   hijacked.sweep                 # => how many were found closed or collected
    class HijackedSockets
      # Seconds between two sweeps: how late at most a closed full hijack stops counting. A
      # sweep of 5,000 open sockets took 0.39-0.41 ms of CPU on Ruby 3.1 and 0.15 ms on 3.3 +
      # YJIT (IO#closed? and a WeakMap look-up each; bench/server/hijacked_sweep.rb): 0.04%
      # and 0.015% of a core.
      SWEEP_INTERVAL = 1.0
      # Seconds: at max_connections the server looks before making room (an app that writes a
      # short answer on the raw socket and closes it at once would otherwise hold the server
      # full of closed sockets until the next sweep), but not more often than this, so that a
      # process full of live WebSockets, admitting a client whenever one closes, does not pay
      # a look per client.
      SWEEP_GAP = 0.05
      # Whether a WeakMap entry can be dropped at once (Ruby 3.3+); before, it goes when its
      # socket is collected.
      DROPS_ENTRIES = ObjectSpace::WeakMap.method_defined?(:delete)

      # An empty set: nothing counted.
      def initialize
        @open = {} # token => true while its socket counts: Integers, so the tokens are all it holds
        @sockets = ObjectSpace::WeakMap.new # token => socket, weakly
        @last = 0
        @swept_at = -Float::INFINITY
      end

      # @param socket [IO] the raw socket (under TLS, the one beneath the SSLSocket, which
      #   closes it with itself)
      # @return [Integer] the token that stands for it (#remove)
      def add(socket)
        token = (@last += 1)
        @sockets[token] = socket
        @open[token] = true
        token
      end

      # The socket was closed through the server's own objects.
      # @param token [Integer] from #add
      # @return [Boolean] whether it still counted (false when a sweep took it off already)
      def remove(token)
        return false unless @open.delete(token)
        @sockets.delete(token) if DROPS_ENTRIES
        true
      end

      # Takes off the sockets that were closed, or collected, since the last look.
      # @param unless_within [Numeric] seconds: no look if the last one is more recent
      # @return [Integer] how many
      def sweep(unless_within = 0)
        now = Timers.now
        return 0 if now - @swept_at < unless_within
        @swept_at = now
        before = @open.size
        @open.delete_if do |token, _|
          socket = @sockets[token]
          next false unless socket.nil? || socket.closed?
          @sockets.delete(token) if DROPS_ENTRIES
          true
        end
        before - @open.size
      end

      # @return [Integer] sockets still counted
      def size
        @open.size
      end
    end
  end
end
