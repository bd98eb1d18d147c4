# frozen_string_literal: true

require_relative "../../readiness"

module Weft
  class Server
    class IdlePool
      # Watches parked sockets with Weft::Readiness (epoll, one-shot registrations): a single
      # watcher task waits on the Readiness descriptor through the reactor, like on any socket,
      # and reports each connection whose socket fired. No fiber per parked connection.
      class EpollStrategy
        # @param on_readable [#call] called, from the watcher task, with each connection whose
        #   socket became readable or hung up
        def initialize(&on_readable)
          @on_readable = on_readable
          @readiness = nil
          @watcher = nil
        end

        # Opens the epoll instance and starts the watcher task. Inside the reactor, in the
        # process that serves (an epoll instance made before a fork is shared with the child).
        def start
          @readiness = Weft::Readiness.new
          @watcher = Weft.spawn(name: "weft idle pool") { watch_loop }
        end

        # Watches the connection's socket until it is readable, once.
        def watch(connection)
          @readiness.register(connection.to_io, connection)
        end

        # Stops watching the connection's socket.
        def unwatch(connection)
          @readiness.deregister(connection.to_io)
        end

        # Stops the watcher task and closes the epoll instance.
        def stop
          @watcher&.cancel
          @watcher = nil
          @readiness&.close
        end

        private

        def watch_loop
          io = @readiness.to_io
          loop do
            io.wait_readable
            @readiness.collect.each { |connection| @on_readable.call(connection) }
          end
        rescue IOError
          nil # closed by #stop while the cancellation was on its way
        end
      end
    end
  end
end
