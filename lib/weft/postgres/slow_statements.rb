# frozen_string_literal: true

module Weft
  module Postgres
    # The statements (by their exact SQL text) a pool has seen run long, so that it keeps them
    # apart from the others: statements that share a connection run one after the other, and a
    # short one sent behind a long one waits for all of it (head-of-line blocking). A pipelined
    # segment's time is all the pool can see of its statements, so a slow segment makes every
    # statement in it suspect; a suspect that later runs quickly, alone or with others, is
    # cleared. A wrong suspicion only costs that statement one trip without company.
    #
    # The times it is given are the server's, as far as the pool can tell them from its own
    # delay in reading the answers (see ServerTime, Pipeline#settle_segment): on a busy process
    # the time until an answer is read is mostly that delay, and counting it marked `select 1`
    # as long over and over. Where the two cannot be told apart the time given is the shorter
    # one, so a statement is marked only when the server is known to have taken long.
    #
    # It also keeps how long each one took the last time it was seen running long, so that the
    # pool can tell when one in flight is due to end (Pool#behind_slow).
    #
    # Bounded: past MEMORY texts the one seen slow longest ago is forgotten (texts with literal
    # values in them, as ActiveRecord writes without prepared statements, are seldom repeated).
    # Used under the pool's lock.
    class SlowStatements
      # Seconds from which a statement (or a segment of them) counts as long: many times what a
      # short statement takes, far less than what a caller queued behind a long one would mind.
      LONG = 0.01
      # Texts remembered at most.
      MEMORY = 256

      def initialize
        @texts = {} # SQL => seconds it took when last seen slow, the most recently seen slow last
        @marked = 0
      end

      # @return [Integer] how many times a statement was found running long (each time counts,
      #   whether or not it was known as slow already)
      attr_reader :marked

      # @param sql [String]
      # @return [Boolean] whether the statement was seen running long (and not quickly since)
      def slow?(sql)
        !@texts.empty? && @texts.key?(sql)
      end

      # @param sql [String]
      # @return [Float, nil] seconds the statement took the last time it ran long (for a
      #   statement of a segment: the segment's time), nil unless it is known as slow
      def seconds(sql)
        @texts[sql]
      end

      # Records how long a segment of pipelined statements took on the server, from the first
      # one's start to the sync point after the last.
      # @param requests [Array<Request>] the segment's statements
      # @param seconds [Float]
      # @return [void]
      def observe_segment(requests, seconds)
        if seconds >= LONG
          requests.each { |request| remember(request.sql, seconds) }
        elsif !@texts.empty?
          requests.each { |request| @texts.delete(request.sql) }
        end
        nil
      end

      # Records how long one statement sent alone took on the server.
      # @param sql [String]
      # @param seconds [Float]
      # @return [void]
      def observe(sql, seconds)
        if seconds >= LONG
          remember(sql, seconds)
        elsif !@texts.empty?
          @texts.delete(sql)
        end
        nil
      end

      private

      def remember(sql, seconds)
        @marked += 1
        @texts.delete(sql)
        @texts[sql] = seconds
        @texts.shift if @texts.size > MEMORY
      end
    end
  end
end
