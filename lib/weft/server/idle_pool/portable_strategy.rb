# frozen_string_literal: true

module Weft
  class Server
    class IdlePool
      # Watches each parked socket from a task of its own, waiting for readability through the
      # reactor. Works wherever the reactor does, but every parked connection holds a fiber
      # (~13 KB of RSS): the fallback where Weft::Readiness is not available.
      class PortableStrategy
        # @param on_readable [#call] called, from the connection's waiting task, with a
        #   connection whose socket became readable or hung up
        def initialize(&on_readable)
          @on_readable = on_readable
          @waiters = {}.compare_by_identity # connection => its waiting task
        end

        # Nothing to start: each #watch spawns its own task.
        def start; end

        # Watches the connection's socket until it is readable, once. The waiting task is
        # detached (no parent): it belongs to the pool, not to whatever parked the connection,
        # which may be the reactor's loop fiber, where Weft.spawn is refused (a timer's
        # callback: Connection#idle_expired parks a connection lingering after its 408).
        def watch(connection)
          wait = proc do |waiting|
            waiting.to_io.wait_readable
            @waiters.delete(waiting)
            @on_readable.call(waiting)
          end
          @waiters[connection] = Weft.scheduler.spawn(nil, "weft idle connection", [connection], wait)
        end

        # Stops watching the connection's socket.
        def unwatch(connection)
          @waiters.delete(connection)&.cancel
        end

        # Nothing to stop: the pool unwatches every connection it still holds first.
        def stop; end
      end
    end
  end
end
