# frozen_string_literal: true

require_relative "recent_answers"
require_relative "core_wait"

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
    # Long is judged against the statement's contemporaries, not against a fixed figure alone:
    # on a machine whose cores are all busy the server answers every statement late (a backend
    # waits for a core before it reads its socket). A `select 1` not yet answered at the poll of
    # a busy reactor after the one it was written in took over 16 ms of the server's time as this
    # process can tell it, though the server answered nothing much sooner then; counted as long,
    # it went alone, its connection taking nothing else meanwhile, until it ran quickly again.
    # So a statement that took LONG or more is:
    # - long at once when the server is known to have taken LONG more on it than on the quickest
    #   answer read while it was in flight (RecentAnswers: that answer's time counted as the
    #   longest it can have been, this statement's as the shortest), or, for a statement sent
    #   alone, when no answer came meanwhile (nothing to compare it with: a statement run alone
    #   on an idle pool; a pipelined segment is sent only while every connection is in use, and
    #   none of them answering is the machine's doing as likely as its own);
    # - otherwise unclear: it may have waited for a core as the others did. An unclear statement
    #   is suspect, and long when it is found LONG again (clearly or not) in a later trip, one
    #   that began after the first was known to be late: the load that held up one trip seldom
    #   holds up the next of the same statement and no other, while a statement that runs long
    #   does so every time. A quick trip in between clears the suspicion.
    # Each time is known to within a turn of the reactor (the polls that did not and did find
    # its answer), so on a reactor whose turns take long a long statement is seldom clear at
    # once: with 16 ms turns a 50 ms one mostly is, with 25 ms turns it is often marked only on
    # its second trip (a trip the polls cannot time at all counts as quick and clears it).
    #
    # Neither comparison helps where there is nothing to compare with: a statement alone on a
    # pool with nothing else answered meanwhile, or a pool whose segments all carry the same
    # statements (one connection, every answer read alone). There a machine whose cores are all
    # taken by other processes made `select 1` take 10-450 ms of the server's time (the backend
    # waits for a core), and marked it, alone 9-28 times in 2.5-3 s beside 3 CPU-bound
    # processes, then kept it apart for as long as the load lasted. So a trip's time counts less
    # the share of its span that this thread waited for a core meanwhile (CoreWait: the machine's
    # load as the operating system saw it, near 0 on an idle machine and 0.5-0.8 beside those
    # processes; of LOAD_REACH at most): a `select 1` held up 20 ms by the load counts as 4-10
    # ms, quick, while a `pg_sleep(0.2)` still counts 176 ms or more. And while that share is CONTENDED or more, a
    # statement alone with nothing answered meanwhile is only suspect when found long, as a
    # segment is: this thread, asleep in its poll, waits less than the backend, so the share
    # errs low, and a `select 1` the load held up 100 ms or more once in a while was still marked.
    # What is remembered of a statement found long is its whole time.
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
      # The share of its time this thread waited for a core (CoreWait) from which the machine
      # counts as loaded: a statement alone with nothing to compare it with is then only suspect
      # when found long, as one found long among others is.
      CONTENDED = 0.5
      # Seconds of a trip that the machine's load can explain (#own_time), at its share: a
      # backend waits for a core each time it wakes, a few scheduling periods of the kernel at
      # most, not for the whole of a statement that sleeps on the server (`pg_sleep`, a lock
      # wait), which the load does not lengthen. Scaled whole, `pg_sleep(0.05)` counted 10-15 ms
      # at a share of 0.7, less on a busy reactor (its time known to within a turn), and went
      # unmarked.
      LOAD_REACH = 0.03

      # @param core_wait [CoreWait] the machine's load as this thread sees it (tests pass their own)
      def initialize(core_wait = CoreWait.new)
        @texts = {} # SQL => seconds it took when last seen slow, the most recently seen slow last
        @alone = {} # SQL => true for those of @texts last seen slow in a trip of their own
        @suspects = {} # SQL => monotonic time by which a trip found unclear was known to be late
        @marked = 0
        @answers = RecentAnswers.new
        @core_wait = core_wait
        @share = 0.0 # the latest share of the machine's load (#own_time)
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

      # @param sql [String]
      # @return [Float, nil] #seconds if the statement was last found long in a trip of its own
      #   (sent alone, or a segment of one), nil if with others or not known as slow. A segment's time is every one of its
      #   statements' as far as the pool can tell, so all of them are kept apart after a long
      #   one; but a `select 1` that shared a segment with a `pg_sleep(1.2)` is no statement
      #   that may wait behind another slow one (Pool#behind_slow) on the strength of the
      #   1.2 s: it waited there for the whole of another `pg_sleep`, 0.7-1.5 s, under load.
      def seconds_alone(sql)
        @texts[sql] if @alone.key?(sql)
      end

      # Records how long a segment of pipelined statements took on the server, from the first
      # one's start to the sync point after the last. Call #answered for it afterwards: it is not
      # its own contemporary. A trip under load counts less the load's share (#own_time), and
      # one that then falls short of LONG counts as quick.
      # @param requests [Array<Request>] the segment's statements
      # @param seconds [Float] the shortest it can have taken
      # @param started [Float] monotonic time the server can have started on it at the latest
      # @return [void]
      def observe_segment(requests, seconds, started)
        if seconds >= LONG && (own = own_time(seconds)) >= LONG
          # Segments are sent only while every connection is in use: no answer from the others
          # for LONG is the machine's doing as likely as the segment's own.
          clear = clearly_long?(own, started, false)
          own_trip = requests.size == 1
          requests.each { |request| found_long(request.sql, seconds, started, clear, own_trip) }
        elsif !(@texts.empty? && @suspects.empty?)
          requests.each { |request| forget(request.sql) }
        end
        nil
      end

      # Records how long one statement sent alone took on the server. Call #answered for it
      # afterwards.
      # @param sql [String]
      # @param seconds [Float] the shortest it can have taken
      # @param started [Float] monotonic time it was sent
      # @return [void]
      def observe(sql, seconds, started)
        if seconds >= LONG && (own = own_time(seconds)) >= LONG
          # Alone with nothing answered meanwhile, it is long by its own time, unless the
          # machine is loaded: then it may be one held up by the load longer than most.
          found_long(sql, seconds, started, clearly_long?(own, started, @share < CONTENDED), true)
        elsif !(@texts.empty? && @suspects.empty?)
          forget(sql)
        end
        nil
      end

      # Records an answer read from the server (a segment's, a statement's sent alone): the
      # contemporaries of the statements in flight meanwhile (see RecentAnswers).
      # @param sent_at [Float] monotonic time its statements were written
      # @param read_at [Float] monotonic time it was read
      # @return [void]
      def answered(sent_at, read_at)
        @answers.record(sent_at, read_at)
        @core_wait.tick(read_at)
      end

      # The share of its time the thread that reads answers waited for a core lately
      # (CoreWait#recent): no reading of its own, for Pipeline#hold_back's guard.
      # @return [Float] 0.0 to 1.0
      def recent_core_wait
        @core_wait.recent
      end

      private

      # A trip's time less what the machine's load explains (CoreWait): the share of its span
      # this thread waited for a core, of LOAD_REACH at most. Asked only of a trip that took LONG
      # at least.
      def own_time(seconds)
        @share = @core_wait.share(Timers.now)
        seconds - @share * (seconds < LOAD_REACH ? seconds : LOAD_REACH)
      end

      # Whether the server is known to have taken LONG more on a statement than on the quickest
      # answer read since it started; `alone` when no answer was read since. The ring is looked
      # through only for a statement that took LONG at least.
      def clearly_long?(seconds, started, alone)
        quickest = @answers.quickest_since(started)
        quickest.nil? ? alone : seconds - quickest >= LONG
      end

      # A statement took LONG at least: it is long if that is clear, or was found so before in a
      # trip known to be late before this one began (not one held up by the same spell of load);
      # else suspect, unless it is known as slow already (it stays so).
      # `alone`: found in a trip of its own (see #seconds_alone).
      def found_long(sql, seconds, started, clear, alone)
        late_by = @suspects[sql]
        if clear || (late_by && late_by <= started)
          @suspects.delete(sql) if late_by
          remember(sql, seconds, alone)
        elsif late_by.nil? && !@texts.key?(sql)
          @suspects[sql] = started + seconds
          @suspects.shift if @suspects.size > MEMORY
        end
      end

      # A quick trip: the statement is neither slow nor suspect.
      def forget(sql)
        @texts.delete(sql)
        @alone.delete(sql)
        @suspects.delete(sql)
      end

      def remember(sql, seconds, alone)
        @marked += 1
        @texts.delete(sql)
        @texts[sql] = seconds
        alone ? @alone[sql] = true : @alone.delete(sql)
        @alone.delete(@texts.shift.first) if @texts.size > MEMORY
      end
    end
  end
end
