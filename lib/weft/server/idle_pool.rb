# frozen_string_literal: true

module Weft
  class Server
    # Holds idle connections (kept alive between requests, or accepted but silent) without a
    # fiber each: the issue requires that an idle keep-alive connection holds no fiber, and a
    # parked fiber costs ~13 KB of RSS (measured: +120 MB for 9,000), far over the budget of
    # 64 MB for 10,000 idle connections.
    #
    # On Linux the sockets are registered with a private epoll instance (EPOLLONESHOT, so each
    # registration fires once). The epoll descriptor is itself readable while any of them is,
    # so a single watcher task waits on it through the reactor like on any socket, then collects
    # the ready connections with epoll_wait(timeout 0) and gives each one a fresh task. The
    # three syscalls are reached through Fiddle (stdlib): no C extension of our own, and the
    # call costs ~2 us, about what io-event's own epoll_ctl per wait costs.
    #
    # Elsewhere (no epoll) #park falls back to a task per idle connection waiting for
    # readability: correct, but it holds a fiber (see docs/server.md).
    class IdlePool
      # What the pool needs of a parked connection: #to_io (the socket to watch),
      # #registered_with_epoll(=), #resume (in a task, once readable), #pending_input? (whether
      # bytes arrived; must not block), #idle_expired (from the loop fiber when its timer fires;
      # must not block) and #close.
      #
      # @return [Boolean] whether epoll can be used here
      def self.epoll?
        return @epoll if defined?(@epoll)
        @epoll = Epoll.available?
      end

      # @return [Integer] connections parked right now
      attr_reader :size

      # @param on_ready [#call] called with a connection whose socket became readable; it must
      #   start a task that calls connection.resume
      def initialize(&on_ready)
        @on_ready = on_ready
        @parked = {} # fd => [connection, timer]
        @size = 0
        @epoll = IdlePool.epoll? ? Epoll.new : nil
        @watcher = nil
        @fallback = {}.compare_by_identity
      end

      # Starts the watcher task. Call inside the server's reactor.
      def start
        return unless @epoll
        @watcher = Weft.spawn(name: "weft idle pool") { watch }
      end

      # Parks a connection until its socket is readable (-> connection.resume in a new task) or
      # `timeout` seconds pass (-> connection.idle_expired in the loop fiber).
      def park(connection, timeout)
        scheduler = Weft.scheduler
        fd = connection.to_io.fileno
        timer = scheduler.timers.after(timeout) { expire(fd, connection) }
        @size += 1
        if @epoll
          @parked[fd] = [connection, timer]
          @epoll.watch(fd, connection.registered_with_epoll)
          connection.registered_with_epoll = true
        else
          entry = [timer, nil]
          @fallback[connection] = entry
          entry[1] = Weft.spawn(name: "weft idle connection") do
            connection.to_io.wait_readable
            wake_fallback(connection)
          end
        end
      end

      # Closes the connection parked longest, to make room for a new one (max_connections).
      # A parked connection whose next request arrived meanwhile is not idle: it is handed back
      # (on_ready) to be served, and the next oldest is tried.
      # @return [Boolean] whether a connection was closed
      def reclaim_oldest
        loop do
          connection = oldest or return false
          take(connection)
          if connection.pending_input?
            @on_ready.call(connection)
          else
            connection.close
            return true
          end
        end
      end

      # Hands back (on_ready) every parked connection for which the block is true, to serve a
      # request that already arrived or to close. Closing them here instead would reset a
      # connection whose request is in the socket buffer but not yet seen by the watcher.
      def release
        selected = []
        if @epoll
          @parked.each_value { |connection, _| selected << connection if yield(connection) }
        else
          @fallback.each_key { |connection| selected << connection if yield(connection) }
        end
        selected.each { |connection| @on_ready.call(take(connection)) }
      end

      # Stops watching (graceful stop): every parked connection is handed back (#release).
      def stop
        @watcher&.cancel
        @watcher = nil
        release { true }
        @epoll&.close
      end

      private

      # @return [Object, nil] the connection parked longest (Hashes keep insertion order, and a
      #   connection is re-inserted each time it parks)
      def oldest
        if @epoll
          entry = @parked.first
          entry && entry[1][0]
        else
          @fallback.first&.first
        end
      end

      # Removes a parked connection from the pool (its timer and fallback task cancelled).
      # @return [Object] the connection
      def take(connection)
        if @epoll
          _, timer = @parked.delete(connection.to_io.fileno)
        else
          timer, task = @fallback.delete(connection)
          task.cancel
        end
        timer.cancel
        @size -= 1
        connection
      end

      def watch
        io = @epoll.io
        loop do
          io.wait_readable
          @epoll.ready_fds.each { |fd| wake(fd) }
        end
      rescue IOError
        nil # closed by #stop while the cancellation was on its way
      end

      def wake(fd)
        connection, timer = @parked.delete(fd)
        return unless connection
        @size -= 1
        timer.cancel
        @on_ready.call(connection)
      end

      def wake_fallback(connection)
        timer, = @fallback.delete(connection)
        return unless timer
        @size -= 1
        timer.cancel
        connection.resume
      end

      # The idle timer fired (in the loop fiber). Timers fire after the reactor's poll, and the
      # poll may have run fibers for a while (io-event resumes fibers waiting on I/O from
      # inside it): a request that arrived meanwhile is in the socket, not yet seen by the
      # watcher. Such a connection stays parked: its readiness is pending, so the watcher (or
      # its fallback task) hands it over on the next turn, instead of it being reset here.
      def expire(fd, connection)
        if @epoll
          return unless @parked[fd]
        else
          return unless @fallback[connection]
        end
        return if connection.pending_input?
        take(connection)
        connection.idle_expired
      end

      # epoll(7) through Fiddle.
      class Epoll
        EPOLLIN = 0x001
        EPOLLRDHUP = 0x2000
        EPOLLONESHOT = 1 << 30
        CTL_ADD = 1
        CTL_MOD = 3
        CLOEXEC = 0o2000000
        # struct epoll_event is packed on x86_64 (12 bytes) and naturally aligned elsewhere (16).
        EVENT_SIZE = RUBY_PLATFORM.start_with?("x86_64") ? 12 : 16
        DATA_OFFSET = EVENT_SIZE - 8
        BATCH = 256
        EVENTS = EPOLLIN | EPOLLRDHUP | EPOLLONESHOT

        def self.available?
          return false unless RUBY_PLATFORM.include?("linux")
          require "fiddle"
          libc = Fiddle.dlopen(nil)
          int = Fiddle::TYPE_INT
          ptr = Fiddle::TYPE_VOIDP
          @create = Fiddle::Function.new(libc["epoll_create1"], [int], int)
          @ctl = Fiddle::Function.new(libc["epoll_ctl"], [int, int, int, ptr], int)
          @wait = Fiddle::Function.new(libc["epoll_wait"], [int, ptr, int, int], int)
          true
        rescue LoadError, Fiddle::DLError
          false
        end

        class << self
          attr_reader :create, :ctl, :wait
        end

        # @return [IO] the epoll descriptor, readable while a watched socket is
        attr_reader :io

        def initialize
          fd = Epoll.create.call(CLOEXEC)
          raise SystemCallError.new("epoll_create1", Fiddle.last_error) if fd.negative?
          @io = IO.for_fd(fd, autoclose: true)
          @fd = fd
          @events = String.new("\0" * (EVENT_SIZE * BATCH), encoding: Encoding::BINARY)
        end

        # Arms a one-shot readability watch for fd (re-arms when it was registered before).
        def watch(fd, registered)
          event = EVENT_SIZE == 12 ? [EVENTS, fd, 0].pack("LLL") : [EVENTS, 0, fd, 0].pack("LLLL")
          op = registered ? CTL_MOD : CTL_ADD
          return if Epoll.ctl.call(@fd, op, fd, event).zero?
          # A descriptor number reused after close is unknown to this epoll (MOD fails with
          # ENOENT), or a new one already known (ADD fails with EEXIST): try the other way.
          other = op == CTL_MOD ? CTL_ADD : CTL_MOD
          return if Epoll.ctl.call(@fd, other, fd, event).zero?
          raise SystemCallError.new("epoll_ctl", Fiddle.last_error)
        end

        # @return [Array<Integer>] descriptors that became readable (or hung up)
        def ready_fds
          count = Epoll.wait.call(@fd, @events, BATCH, 0)
          return [] unless count.positive?
          Array.new(count) { |i| @events.unpack1("L", offset: i * EVENT_SIZE + DATA_OFFSET) }
        end

        def close
          @io.close unless @io.closed?
        end
      end
    end
  end
end
