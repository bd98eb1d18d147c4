# frozen_string_literal: true

module Weft
  class Server
    # The server-wide budget for request heads parked unfinished (Connection#read_head): the
    # memory each such connection's buffer holds (its String's allocation, see
    # Connection#memory_held_by_head; the head is up to max_header_bytes), for as long as
    # header_timeout. Without a budget the bound is max_connections x max_header_bytes (640 MB by
    # default): 8,000 connections each holding 60 KB of a head grew a process by 432 MB, and
    # malloc kept most of it after they were gone.
    #
    # Past the budget the server drops heads to get back under it: first the oldest of those
    # holding LARGE bytes or more (a real client's head rarely spans packets, and almost never
    # 8 KiB of them: nginx reads heads into 1 KiB, then 8 KiB buffers), which a flood of big
    # partial heads is made of, then the oldest of the others. Only connections parked in the
    # IdlePool are dropped; one being served (its head's next bytes arrived) is left alone.
    #
    # Nothing here runs for a head that arrives whole, or for a keep-alive connection: only
    # when a head is parked unfinished, when it completes after that, and when such a
    # connection closes.
    class PartialHeads
      # Bytes from which a partial head is among the first dropped.
      LARGE = 8192

      # @return [Integer] the bytes of memory held by parked partial heads now
      attr_reader :bytes

      # @param budget [Integer] bytes
      def initialize(budget)
        @budget = budget
        @bytes = 0
        # connection => bytes held, least recently grown first (#hold moves a head that grew to
        # the back: of heads that keep dribbling in, those quiet longest go first)
        @small = {}.compare_by_identity
        @large = {}.compare_by_identity
      end

      # @return [Integer] connections holding a partial head
      def size
        @small.size + @large.size
      end

      # Records that `connection` holds `bytes` of an unfinished head (again: its new size),
      # then, while over the budget, yields the connections to drop, oldest large ones first.
      # The block drops a connection it can (and #release's it); one it cannot (not parked) is
      # passed over. Walks the buckets in place (deleting while iterating is allowed, adding is
      # not, and the block adds nothing): no copy of thousands of keys per park under a flood.
      # @yieldparam victim [Connection]
      # @return [void]
      def hold(connection, bytes)
        release(connection)
        (bytes >= LARGE ? @large : @small)[connection] = bytes
        @bytes += bytes
        return if @bytes <= @budget
        @large.each_key { |victim| @bytes <= @budget ? (return) : yield(victim) }
        @small.each_key { |victim| @bytes <= @budget ? (return) : yield(victim) }
      end

      # Forgets `connection`'s partial head (complete, dropped, or closed). Idempotent.
      # @return [void]
      def release(connection)
        held = @small.delete(connection) || @large.delete(connection)
        @bytes -= held if held
      end
    end
  end
end
