# frozen_string_literal: true

module Weft
  module Postgres
    # The answers a pool read last, each as the longest the server can have taken on it (from
    # when its statements were written to when the answer was read) and when it was read: what
    # SlowStatements judges a statement's time against. On a machine whose cores are all busy
    # (other processes, other backends of the same server) the server answers every statement
    # late, a `select 1` as much as a long one; an answer that came quickly while a statement was
    # in flight shows what the server took under the same load, and how much longer that
    # statement took is its own.
    #
    # A fixed ring: recording is two stores, paid on every answer; only a statement that looks
    # long (rare) looks through it. Used under the pool's lock.
    class RecentAnswers
      # Answers kept. A statement that looks long has been in flight for a few turns of the
      # reactor at most; a few turns' answers of a pool's connections fit.
      SIZE = 32

      def initialize
        @read_at = Array.new(SIZE, -Float::INFINITY) # monotonic time each answer was read
        @took = Array.new(SIZE, Float::INFINITY)     # the longest the server can have taken on it
        @next = 0
      end

      # Records an answer.
      # @param sent_at [Float] monotonic time its statements were written (the earliest the server
      #   can have started on them)
      # @param read_at [Float] monotonic time it was read (the latest it can have arrived)
      # @return [void]
      def record(sent_at, read_at)
        index = @next
        @read_at[index] = read_at
        @took[index] = read_at - sent_at
        @next = index + 1 == SIZE ? 0 : index + 1
        nil
      end

      # The quickest answer read after `moment`, each counted as the longest the server can have
      # taken on it: the most the server's time on a statement in flight since `moment` can owe
      # to the load the server was under meanwhile.
      # @param moment [Float] monotonic time
      # @return [Float, nil] seconds; nil when no answer kept was read after `moment`
      def quickest_since(moment)
        quickest = nil
        index = 0
        while index < SIZE
          if @read_at[index] > moment
            took = @took[index]
            quickest = took if quickest.nil? || took < quickest
          end
          index += 1
        end
        quickest
      end
    end
  end
end
