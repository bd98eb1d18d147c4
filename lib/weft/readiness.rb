# frozen_string_literal: true

# Weft::Readiness (C, ext/weft_readiness): readiness notification for many IOs with no fiber
# per IO. A reactor wait parks a fiber per IO; to watch thousands of mostly silent sockets
# (the server's idle keep-alive connections) a fiber each costs ~13 KB of RSS apiece. Instead:
#
#   readiness = Weft::Readiness.new          # one epoll instance
#   readiness.register(socket, connection)   # one-shot: fires once when readable or hung up
#   readiness.to_io.wait_readable            # one fiber waits for all of them, via the reactor
#   readiness.collect                        # => [connection, ...], each registration once
#   readiness.deregister(socket)             # stop watching (before closing the socket)
#   readiness.close
#
# Readiness.available? is false where there is no epoll (not Linux); Readiness.new then
# raises NotImplementedError, and callers need a fallback (the server's IdlePool has one).
# io-event offers no such API: each of its waits resumes a fiber.
require_relative "native_extension"
Weft::NativeExtension.require(__dir__, "weft_readiness")
