# frozen_string_literal: true

# Weft::SharedCounters (C, ext/weft_readiness/shared_counters.c): a fixed table of 64-bit
# integers in memory shared with the processes forked after it was made (an anonymous
# MAP_SHARED mapping), read and written with atomic operations and no system call.
#
#   counters = Weft::SharedCounters.new(16)   # 16 cells, all 0
#   fork { counters[3] = Process.pid; counters.add(0, 1) }
#   Process.wait
#   counters[0]                                # => 1, the child's write
#
# Ruby has no shared memory of its own that is not experimental (IO::Buffer warns so on Ruby
# 3.1 to 3.3); a pipe or a file costs a system call for every look. The server's master makes one
# before forking its workers, where each worker publishes its load and reads its siblings' at
# every accept (Weft::Server::WorkerLoads).
require_relative "native_extension"
Weft::NativeExtension.require(__dir__, "weft_readiness")
