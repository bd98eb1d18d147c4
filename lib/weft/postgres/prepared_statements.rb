# frozen_string_literal: true

require "pg"
require "securerandom"
require_relative "statement_scope"

module Weft
  module Postgres
    # The named prepared statements of one connection: which statement texts the pool has
    # prepared on it, under which names, and which texts it has seen once and will prepare the
    # next time they come. Pool#query sends a text it has seen before on the same connection as
    # a named statement (Bind/Execute only, no Parse), so the server parses and plans it once
    # per connection instead of once per call: half of what the server spends on a short
    # statement (bench/results/postgres-ruby-3.3.md, 2026-12-07).
    #
    #   statements = PreparedStatements.new(256)
    #   statements.lookup("select 1", [], segment, raw) # => nil: the first time; sent unnamed
    #   statements.lookup("select 1", [], segment, raw) # => :prepare: the caller sends #prepare's
    #                                                   #    Parse, then Bind/Execute of its name
    #   statements.lookup("select 1", [], segment, raw) # => the Statement: Bind/Execute its name
    #
    # (Pipeline#send_named in the pipeline, #plain_statement and #exec in plain mode.)
    #
    # A text is prepared only after it ran once unnamed, so that a text's first errors reach its
    # caller as they would without the cache, and texts that never come again (SQL with its
    # values written in, as ActiveRecord sends with prepared statements off) cost no Parse and
    # no server memory. What a text that never comes again does cost is hashing it, a look-up and
    # a place in the table of texts seen (bounded: SEEN_PER_STATEMENT times `limit`, emptied of
    # them when full).
    #
    # The table is keyed by the texts' hashes (String#hash), not the texts: remembering a text
    # seen once costs an Integer key, where a String key made Hash#[]= intern a frozen copy of
    # each new text (a look-up of a text never seen before took ~440 ns, now ~110 ns, 3.3 +
    # YJIT). A statement keeps its text and is used only for a text equal to it; two texts with
    # one hash (about one in 2^62) cost at most an early Parse of the second, whose error, if
    # any, sends its statement again unnamed.
    #
    # Names are PREFIX, 12 random hex digits of the table's own and a number that never repeats
    # in it (`weft_ps_3f9a1c0b2d4e_17`), so a name is never taken twice even when this table is
    # wrong about the server (a user's DEALLOCATE ALL on a pinned connection), a user's own
    # PREPAREd names do not meet them, and neither do another connection's: behind a proxy that
    # hands one client connection's statements to several server sessions and several client
    # connections' to one (PgBouncer's transaction pooling before 1.21), a name is either
    # missing (26000: the statement is sent again unnamed) or this table's own statement, never
    # another connection's under the same name.
    #
    # Bounded to `limit` statements: preparing one more evicts the least recently used (an
    # approximation, CLOCK: each statement has a bit set when used, and the eviction passes over
    # those with the bit, clearing it, to the first without). An evicted statement (and one
    # dropped after 0A000, which still exists on the server) is deallocated by a DEALLOCATE sent
    # before the next statement prepared (#doomed), in the same segment, whose result is read in
    # order (libpq before 17 has no Close, and pg 1.7 does not send one in pipeline mode).
    #
    # Frozen texts are looked up by identity first (an application's SQL literals are the same
    # String on every call; a look-up by identity does not hash the text), others by their
    # hash. Texts longer than TEXT_MAX bytes are never prepared nor remembered: hashing them
    # costs, they would stay in memory here, and they are mostly one-off (a bulk insert's VALUES).
    #
    # Parameters are sent as text with no type (pg's default type map for queries,
    # PG::TypeMapAllStrings, or one that encodes as text of no type too: #untyped_map?), so the
    # server infers their types from the text alone, the same at every call of it, named or
    # not: a text's statement fits every call of it. A call with typed parameters (a Hash with
    # `type:`), or on a connection with a type map for queries that sends types (chosen by the
    # values' classes), is sent unnamed (#lookup): a statement prepared for one set of types
    # must not be bound to another.
    #
    # Everything here runs under whoever holds the connection: the pool's lock for a shared one,
    # its one fiber for a pinned one.
    class PreparedStatements
      # What every name starts with.
      PREFIX = "weft_ps_"
      # Statements kept per connection unless the pool is told otherwise (Pool.new's
      # `prepared_statements:`): pgjdbc's preparedStatementCacheQueries (asyncpg keeps 100,
      # ActiveRecord 1000).
      DEFAULT_LIMIT = 256
      # Bytes of a text that is prepared, at most (as StatementScope's ROLE_TEXT_MAX).
      TEXT_MAX = 4096
      # Texts seen once are remembered up to this many times `limit` (at least MIN_SEEN).
      SEEN_PER_STATEMENT = 4
      # Texts seen once are remembered up to at least this many.
      MIN_SEEN = 256
      # SQLSTATE invalid_sql_statement_name: the named statement does not exist (a user's
      # DEALLOCATE ALL or DISCARD ALL on a pinned connection).
      NO_SUCH_STATEMENT = "26000"
      # SQLSTATE feature_not_supported, which a named statement meets as "cached plan must not
      # change result type" after a schema change (ALTER TABLE) changed what it returns.
      PLAN_CHANGED = "0A000"
      # SQLSTATE query_canceled.
      CANCELED = "57014"
      # SQLSTATE in_failed_sql_transaction: the transaction block had failed before, so the
      # Parse was not run (the text may be fine).
      IN_FAILED_TRANSACTION = "25P02"
      # SQLSTATE duplicate_prepared_statement: the name was taken (a holder's own PREPARE of a
      # name of this table's making); the text may be fine, and the next name is another.
      NAME_TAKEN = "42P05"
      # A `*` standing for a row's columns (`select *`, `t.*`, `returning *`; not `count(*)`
      # nor a multiplication), looked for in a text whose quoted parts and comments are blanked
      # out. It errs towards a match (`exists (select * ...`, `count( *)`): such a text goes
      # unnamed inside transaction blocks for nothing, the cheap side to err on.
      WHOLE_ROW = /(?:\A|[\s,.])\*\s*(?:[,;)]|from\b|\z)/i
      # A text that starts with DEALLOCATE or DISCARD: what #forget_deallocated looks for first,
      # anchored, so that it gives up at a text's first word (~0.1 µs; a search through the
      # text for either word took ~1.3 µs on a Rails INSERT, 3.3 + YJIT). A text with a
      # semicolon is searched with DEALLOCATION itself.
      DEALLOCATING = /\A#{StatementScope::LEADING}(?:deallocate|discard)\b/i
      # DISCARD ALL, DEALLOCATE [PREPARE] ALL and DEALLOCATE [PREPARE] name, at the start of any
      # statement of a text (Ruby's named groups only: a pattern with named groups captures
      # no other).
      DEALLOCATION = /#{StatementScope::STATEMENT_START}(?:discard\s+(?<all>all)\b|
                      deallocate\s+(?:prepare\s+)?(?:(?<all>all)\b|"(?<quoted>(?:[^"]|"")*)"|(?<name>[^\s;]+)))/ix

      # Errors of a Parse that say nothing against its text: a cancel request (meant for
      # another statement, maybe), a transaction block failed before, a name taken.
      NOT_THE_TEXTS = [CANCELED, IN_FAILED_TRANSACTION, NAME_TAKEN].freeze

      # Marks a text seen once in the table (the next call prepares it).
      SEEN = :seen
      # Marks a text whose Parse failed: sent unnamed from then on (while remembered).
      REFUSED = :refused
      private_constant :SEEN, :REFUSED, :NOT_THE_TEXTS

      # One named statement: its name, the text it was prepared from (and its hash, the table's
      # key), whether its Parse came back (:pending until then; :ready; :gone once dropped),
      # the pipeline segment its Parse was sent in (a statement pending is used only in the
      # same segment: had its Parse failed, a later segment's Bind would fail on its own),
      # CLOCK's bit, and whether the text's result columns follow a table's (#whole_row?: the
      # statement is not used inside a transaction block).
      class Statement
        # @return [String]
        attr_reader :name
        # @return [String] frozen
        attr_reader :text
        # @return [Integer] the text's hash: the table's key
        attr_reader :key
        # @return [Symbol] :pending, :ready or :gone
        attr_accessor :state
        # @return [Integer, nil]
        attr_reader :segment
        # @return [Boolean] used since the eviction last passed over it
        attr_accessor :used
        # @return [Boolean] its result's columns follow a table's (`select *`, `returning *`)
        attr_reader :whole_row

        # @param name [String] the server-side statement name
        # @param text [String] the SQL, frozen
        # @param segment [Integer, nil] the pipeline segment its Parse goes out in
        def initialize(name, text, segment)
          @name = name
          @text = text
          @key = text.hash
          @segment = segment
          @state = :pending
          @used = false
          @whole_row = PreparedStatements.whole_row?(text)
        end
      end

      # @return [Integer] statements kept at most
      attr_reader :limit
      # @return [Integer] statements prepared on the connection (Parses sent), in all
      attr_reader :prepares

      # @param limit [Integer] statements kept at most (positive)
      def initialize(limit)
        raise ArgumentError, "limit must be a positive Integer" unless limit.is_a?(Integer) && limit.positive?
        @limit = limit
        @seen_limit = [limit * SEEN_PER_STATEMENT, MIN_SEEN].max
        @table = {}                        # text's hash => Statement, SEEN or REFUSED, oldest first
        @by_identity = {}.compare_by_identity # frozen text => Statement (a shortcut to @table)
        @count = 0    # Statements in @table
        @seen = 0     # SEEN and REFUSED marks in @table
        @serial = 0   # the last name's number
        # This table's own part of every name: no two connections (of this process or another)
        # use the same names, should a proxy hand their statements to one server session.
        @prefix = "#{PREFIX}#{SecureRandom.hex(6)}_"
        @prepares = 0
        @doomed = []  # names to deallocate, before the next Parse
        @untyped_map = nil # the last type map for queries found to send no types (#untyped?)
      end

      # @return [Integer] named statements kept (pending or ready)
      def size
        @count
      end

      # @return [Array<String>] names to DEALLOCATE before the next statement prepared
      attr_reader :doomed

      # What to do with a statement: send it as a named statement already prepared (or whose
      # Parse is pending in the same pipeline segment: it comes first, and if it fails the
      # segment is rolled back with it), prepare it (:prepare: it ran once unnamed), or send it
      # unnamed (nil: the first time, or it cannot be prepared; remembered then).
      # @param sql [String]
      # @param params [Array]
      # @param segment [Integer, nil] the pipeline segment being built (nil: plain mode)
      # @param raw [PG::Connection] for its type map for queries, when params are given
      # @return [Statement, Symbol, nil]
      def lookup(sql, params, segment, raw)
        return nil if sql.bytesize > TEXT_MAX || !(params.empty? || untyped?(params, raw))
        if sql.frozen? && (statement = @by_identity[sql])
          return usable(statement, segment) unless statement.state.equal?(:gone)
          @by_identity.delete(sql)
        end
        key = sql.hash
        found = @table[key]
        if found.nil?
          remember(key)
        elsif found.equal?(SEEN)
          preparable?(sql, key) ? :prepare : nil
        elsif found.equal?(REFUSED)
          nil
        elsif found.text == sql
          alias_frozen(sql, found) if sql.frozen?
          usable(found, segment)
        end
      end

      # A new named statement for `sql` (whose #lookup said :prepare), kept from now on as
      # pending; room made for it first (#evict, whose victims join #doomed). The caller sends
      # #doomed's DEALLOCATEs (then clears it), the Parse, and reports the Parse's result
      # (#parsed).
      # @return [Statement, nil] nil when there is no room: every statement kept is pending
      #   (the text is sent unnamed, and prepared on a later call)
      def prepare(sql, segment)
        while @count >= @limit
          return nil unless evict
        end
        @serial += 1
        @prepares += 1
        statement = Statement.new("#{@prefix}#{@serial}", sql.frozen? ? sql : sql.dup.freeze, segment)
        @seen -= 1 unless @table[statement.key].nil? # its SEEN mark
        @table[statement.key] = statement
        @count += 1
        statement
      end

      # The Parse of `statement` came back (in order, in the pipeline or in plain mode) with
      # `result`: ready when it succeeded (a named statement outlives a rollback of the
      # segment it was made in: it is not transactional), dropped otherwise. A text whose Parse
      # failed is sent unnamed from then on (so that its error is its caller's, as the unnamed
      # statement's), unless its error says nothing against the text (NOT_THE_TEXTS: a cancel
      # request, meant for another statement maybe; a transaction block failed before; a name
      # taken) or the Parse was skipped (an earlier statement of its segment failed), when the
      # next call prepares it again.
      # @param status [Integer] the result's status
      # @param code [String, nil] its SQLSTATE
      def parsed(statement, status, code)
        if status == PG::PGRES_COMMAND_OK
          statement.state = :ready unless statement.state.equal?(:gone)
        else
          drop(statement, status == PG::PGRES_FATAL_ERROR && !NOT_THE_TEXTS.include?(code) ? REFUSED : SEEN)
        end
      end

      # A DEALLOCATE came back: when it was skipped (an earlier statement of its segment failed)
      # or cancelled (a cancel request meant for another statement may land on it), it is sent
      # again with the next statement. (One that failed otherwise found the statement gone; a
      # DEALLOCATE is not transactional, so what one did stays when its segment rolls back.)
      # @param name [String]
      # @param status [Integer] its result's status
      # @param code [String, nil] its SQLSTATE
      def deallocated(name, status, code)
        @doomed << name if status == PG::PGRES_PIPELINE_ABORTED || code == CANCELED
      end

      # Whether a named statement's error is the cache's, not the caller's: the statement does
      # not exist (26000: a user's DEALLOCATE ALL or DISCARD ALL) or its plan cannot serve the
      # schema any more (0A000 "cached plan must not change result type"). It is dropped then
      # (and deallocated, in the second case), and the caller's statement is to be sent again
      # unnamed; the next call prepares it again.
      # @param result [PG::Result, nil] the failed result
      # @return [Boolean]
      def invalidated?(statement, result)
        return false if result.nil?
        code = result.error_field(PG::PG_DIAG_SQLSTATE)
        if code == NO_SUCH_STATEMENT
          drop(statement, SEEN)
        elsif code == PLAN_CHANGED && result.error_message.include?("cached plan")
          @doomed << statement.name unless statement.state.equal?(:gone)
          drop(statement, SEEN)
        else
          return false
        end
        true
      end

      # Forgets every statement and text: the session's statements were deallocated (DISCARD
      # ALL).
      def clear
        @table.each_value { |value| value.state = :gone if value.is_a?(Statement) }
        @table.clear
        @by_identity.clear
        @doomed.clear
        @count = 0
        @seen = 0
      end

      # Plain mode (a connection held by the caller: pinned by Pool#with, leased, or taken by
      # Pool#query for one statement): the named statement to run the statement as (#exec), as
      # #lookup says, prepared with a round trip of its own if this is the text's second time;
      # nil: run it unnamed. Apart from #exec so that the caller can time the statement's own
      # round trip (ServerTime takes one wait).
      #
      # Outside a transaction block, the DEALLOCATEs of statements evicted or dropped go first.
      # Inside one (#in_transaction) a failure cannot be undone by sending the statement again,
      # so that only what cannot fail for the cache's own reasons is named there. In a
      # transaction block that failed already everything goes unnamed (and fails with 25P02, as
      # it would have).
      # @param raw [PG::Connection] in plain mode, not busy
      # @return [Statement, nil]
      def plain_statement(raw, sql, params)
        case raw.transaction_status
        when PG::PQTRANS_IDLE
          deallocate_doomed(raw) unless @doomed.empty?
          found = lookup(sql, params, nil, raw)
          found.equal?(:prepare) ? prepare_plain(raw, sql) : found
        when PG::PQTRANS_INTRANS
          in_transaction(raw, sql, params)
        end
      end

      # Plain mode: runs the statement as `statement` (#plain_statement), or unnamed when nil
      # or when the named statement turns out gone (26000) or stale (0A000) outside a
      # transaction block, where its failed Bind leaves nothing to roll back. Inside one the
      # failure aborted the transaction: it is the caller's (#retry_unnamed?).
      # @param raw [PG::Connection] in plain mode, not busy
      # @param statement [Statement, nil]
      # @return [PG::Result]
      def exec(raw, statement, sql, params)
        if statement
          begin
            return raw.exec_prepared(statement.name, params)
          rescue PG::Error => e
            raise unless retry_unnamed?(statement, e, raw)
          end
        end
        result = raw.exec_params(sql, params)
        forget_deallocated(sql)
        result
      end

      # A named statement of a held connection failed with `error`: whether to send the
      # statement again unnamed. Only when the failure was the cache's (#invalidated?: the
      # statement is dropped then) and no transaction block was open, whose failure the caller
      # sees whatever comes next. Inside one, a statement found missing (26000) means the
      # session's statements were deallocated behind the table's back (a holder's own
      # DEALLOCATE ALL or DISCARD ALL on the PG::Connection): the table forgets them all, so
      # that it fails the holder once.
      # @param error [PG::Error]
      # @param raw [PG::Connection]
      # @return [Boolean]
      def retry_unnamed?(statement, error, raw)
        return false unless invalidated?(statement, error.result)
        return true if raw.transaction_status == PG::PQTRANS_IDLE
        clear if error.result.error_field(PG::PG_DIAG_SQLSTATE) == NO_SUCH_STATEMENT
        false
      end

      # Keeps the table true after a statement the holder ran unnamed on its connection
      # (PreparedStatements#exec, Lease's), which may have deallocated some of the table's
      # statements: DISCARD ALL and DEALLOCATE ALL forget them all, DEALLOCATE of one of this
      # table's names forgets that one. (What the holder runs on the PG::Connection itself is
      # out of sight: see #retry_unnamed?.)
      # @param sql [String] a text that ran
      # @return [void]
      def forget_deallocated(sql)
        return unless @count.positive? && (DEALLOCATING.match?(sql) || sql.include?(";"))
        sql.scan(DEALLOCATION) do
          match = Regexp.last_match
          if match[:all]
            clear
            return
          end
          # PostgreSQL folds an unquoted name to lower case, and keeps a quoted one as written.
          name = match[:quoted]&.gsub('""', '"') || match[:name].downcase
          found = @table.each_value.find { |value| value.is_a?(Statement) && value.name == name }
          drop(found, SEEN) if found
        end
      end

      # Whether a text's result has columns that follow a table's definition (`select *`,
      # `t.*`, `returning *`): a schema change (ALTER TABLE ... ADD COLUMN) changes what its
      # named statement returns, and PostgreSQL refuses to run it then (0A000 "cached plan
      # must not change result type"). Inside a transaction block that failure would abort
      # the transaction; outside, the statement is sent again unnamed (#exec).
      # @param sql [String]
      # @return [Boolean]
      def self.whole_row?(sql)
        sql.include?("*") && WHOLE_ROW.match?(sql.gsub(StatementScope::QUOTED, " "))
      end

      private

      # Whether a text seen again is to be prepared: not one that changes the session
      # (StatementScope#session_state?: a DEALLOCATE or DISCARD among them would drop the
      # statements the table holds, its own included, while running as one of them). Asked once
      # per text and connection; a text refused is marked so.
      def preparable?(sql, key)
        return true unless StatementScope.session_state?(sql)
        @table[key] = REFUSED
        false
      end

      # Finds `statement` by identity from now on when `sql` (frozen) comes again. Emptied
      # first once it holds twice as many texts as statements are kept (it keeps texts of
      # statements evicted, until they come again, and texts frozen afresh for each call).
      def alias_frozen(sql, statement)
        @by_identity.clear if @by_identity.size >= @limit * 2
        @by_identity[sql] = statement
      end

      # A statement pending is used only in the segment its Parse is in.
      def usable(statement, segment)
        return nil if statement.state.equal?(:pending) && statement.segment != segment
        statement.used = true
        statement
      end

      # Whether every parameter goes as untyped text: no Hash (which may carry a type), and the
      # connection's type map for queries sends none (#untyped_map?; asked once per map).
      def untyped?(params, raw)
        map = raw.type_map_for_queries
        unless map.equal?(@untyped_map)
          return false unless untyped_map?(map)
          @untyped_map = map
        end
        params.none?(Hash)
      end

      # Whether a type map for queries sends every value as text of no type (OID 0): pg's
      # default, PG::TypeMapAllStrings, or a PG::TypeMapByClass whose encoders are all such
      # (Sequel's postgres adapter sets one: Integer, Float, true and false as text), over one
      # that is. A map that picks typed encoders (PG::BasicTypeMapForQueries: true as a
      # boolean) or picks them by code is not: the statement would be bound to the types of
      # the call that prepared it.
      def untyped_map?(map)
        case map
        when PG::TypeMapAllStrings then true
        when PG::TypeMapByClass
          map.coders.each_value.all? { |coder| coder.is_a?(PG::Coder) && coder.oid.zero? && coder.format.zero? } &&
            untyped_map?(map.default_type_map)
        else false
        end
      end

      # A text seen for the first time: remembered.
      # @return [nil] (sent unnamed)
      def remember(key)
        forget_seen if @seen >= @seen_limit
        @table[key] = SEEN
        @seen += 1
        nil
      end

      # Drops every text seen once (but not the statements): texts that never come again are
      # not kept for ever. A text that does come again is seen afresh.
      def forget_seen
        @table.delete_if { |_, value| !value.is_a?(Statement) }
        @seen = 0
      end

      # Takes a statement out of the table (if it is still there), leaving `mark` (SEEN,
      # REFUSED) for its text in its place, if given.
      def drop(statement, mark = nil)
        return if statement.state.equal?(:gone)
        statement.state = :gone
        @count -= 1
        key = statement.key
        return unless @table[key].equal?(statement)
        @table.delete(key)
        return unless mark
        @table[key] = mark
        @seen += 1
      end

      # Evicts one ready statement: the first, oldest first, not used since the eviction last
      # passed over it (those passed over go to the end, their bits cleared; if all were used,
      # the oldest). Statements pending are not evicted (their Parse may yet fail, and the
      # DEALLOCATE with it). Its name joins #doomed.
      # @return [Boolean] false when every statement is pending
      def evict
        victim = nil
        passed = []
        @table.each_value do |value|
          next unless value.is_a?(Statement) && value.state.equal?(:ready)
          unless value.used
            victim = value
            break
          end
          passed << value
        end
        passed.each do |statement|
          statement.used = false
          @table.delete(statement.key)
          @table[statement.key] = statement
        end
        victim ||= passed.first or return false
        @doomed << victim.name
        drop(victim)
        true
      end

      # Plain mode inside a transaction block (#plain_statement). A statement named there must
      # not fail for the cache's own reasons, which would abort the caller's transaction: one
      # whose result follows a table's columns (#whole_row?, 0A000 after a schema change) goes
      # unnamed (prepared when it comes outside one). Prepared statements are not
      # transactional (PostgreSQL keeps one made in a transaction or savepoint that rolls back,
      # and a DEALLOCATE is not undone: checked on PostgreSQL 15), so what the table records
      # here stays true whatever the transaction's end.
      # @return [Statement, nil]
      def in_transaction(raw, sql, params)
        found = lookup(sql, params, nil, raw)
        if found.equal?(:prepare)
          PreparedStatements.whole_row?(sql) ? nil : prepare_in_transaction(raw, sql)
        elsif found.nil? || !found.whole_row
          found
        end
      end

      # The Parse inside a transaction block, after the DEALLOCATEs of the statements its room
      # was made from (each known to exist: deallocating a name that did not would abort the
      # transaction; names doomed for other reasons wait for a moment outside a transaction
      # block, #plain_statement). A failure here, the Parse's or a DEALLOCATE's, aborted the
      # caller's transaction: it is raised to the caller (for a Parse, the error the unnamed
      # statement would have had), and the table does not count the statement.
      # @return [Statement, nil] nil when there is no room (every statement kept is pending)
      def prepare_in_transaction(raw, sql)
        kept = @doomed.size
        statement = prepare(sql, nil) or return nil
        evicted = @doomed.slice!(kept..)
        prepare_round_trip(statement, refuse: false) do
          evicted.each { |name| raw.exec("DEALLOCATE #{name}") }
          raw.prepare(statement.name, sql)
        end
      rescue PG::Error => e
        clear if e.result&.error_field(PG::PG_DIAG_SQLSTATE) == NO_SUCH_STATEMENT # an evicted one was gone
        raise
      end

      # Plain mode: the Parse in a round trip of its own. Interrupted, the statement may or may
      # not exist on the server: its name is deallocated before the next Parse.
      # @return [Statement, nil] nil when the Parse failed (the statement is sent unnamed)
      def prepare_plain(raw, sql)
        statement = prepare(sql, nil) or return nil
        prepare_round_trip(statement) do
          deallocate_doomed(raw) # room made for it
          raw.prepare(statement.name, sql)
        end
      rescue PG::Error
        raise if raw.status != PG::CONNECTION_OK
        nil
      end

      # Runs the block, which sends `statement`'s Parse (and what goes before it), and records
      # its outcome (#parsed); the block's PG::Error goes on. With `refuse: false` a failed
      # Parse leaves its text to be prepared again on its next call rather than refused: inside
      # a transaction block the error reaches the caller at once, with no unnamed statement
      # sent after it, so trying again costs no extra round trip (and a text that failed
      # because of the transaction, a table it dropped, is prepared once it works).
      # Interrupted, the statement may or may not exist on the server: its name is deallocated
      # before the next Parse outside a transaction block.
      # @return [Statement]
      def prepare_round_trip(statement, refuse: true)
        done = false
        begin
          yield
          done = true
          parsed(statement, PG::PGRES_COMMAND_OK, nil)
          statement
        rescue PG::Error => e
          done = true
          code = e.result&.error_field(PG::PG_DIAG_SQLSTATE)
          refuse ? parsed(statement, PG::PGRES_FATAL_ERROR, code) : drop(statement, SEEN)
          raise
        ensure
          unless done
            drop(statement)
            @doomed << statement.name
          end
        end
      end

      # Plain mode: deallocates the statements evicted or dropped (one that is gone already
      # answers 26000, which is what was wanted).
      def deallocate_doomed(raw)
        until @doomed.empty?
          name = @doomed.first
          begin
            raw.exec("DEALLOCATE #{name}")
          rescue PG::Error => e
            raise if raw.status != PG::CONNECTION_OK || e.result&.error_field(PG::PG_DIAG_SQLSTATE) != NO_SUCH_STATEMENT
          end
          @doomed.shift
        end
      end
    end
  end
end
