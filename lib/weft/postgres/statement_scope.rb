# frozen_string_literal: true

module Weft
  module Postgres
    # Which statements cannot share a connection with other callers' statements, told from
    # their text: those that open a transaction (the statements that follow belong to it) or
    # set the one under way (on a shared connection that is its pipeline segment's implicit
    # transaction, which the other callers' statements of the segment share), and those that
    # leave state in the session (the next caller on that connection would inherit it).
    # Pool#query runs settings of the transaction in a pipeline segment of their own (Sequel's
    # weft_postgres adapter relies on that); ActiveRecord's weft_postgresql adapter runs each
    # kind on a connection of its own (ActiveRecord::ConnectionAdapters::WeftPostgreSQL::
    # RoutedConnection).
    #
    # The test is on the SQL text, so it is deliberately broad: a false match only costs a
    # connection held a little longer, a miss would leak state into the shared pool. Leading
    # comments (query log tags) are skipped; each statement of a multi-statement string counts.
    # What it cannot see: a function or procedure of the application's own that changes the
    # session (its body is not in the text); such a caller pins the session first
    # (Pool#with, or the adapters' ways to it: ActiveRecord's raw_connection, DB.synchronize).
    module StatementScope
      # Whitespace and comments before a statement's first word. Block comments nest, as in
      # PostgreSQL (`/* a /* b */ c */` is one), and are matched as they nest, in one pass that
      # never goes back into them (an atomic group, possessive runs). The lazy `/\*.*?\*/` this
      # replaced could end a comment at any later `*/`, so that `/* app */ UPDATE t /* c */
      # SET a = 1` counted as a SET (a session change), and on Ruby 3.1, which does not memoize
      # regexp backtracking, a text of n comments took 2^n tries when no word followed them
      # (22 comments: 0.5 s).
      LEADING = %r{(?>(?:\s|--[^\n]*(?:\n|\z)|(?<comment>/\*(?:[^*/]++|\*(?!/)|/(?!\*)|\g<comment>)*+\*/))*)}
      # Where a statement starts: the text's start or after a semicolon.
      STATEMENT_START = /(?:\A|;)#{LEADING}/
      # BEGIN, START TRANSACTION; SET LOCAL, SET TRANSACTION, SET CONSTRAINTS (settings of the
      # transaction under way: on a shared connection that is the implicit transaction of a
      # pipeline segment, which the other callers' statements of the segment share, and they
      # ran with the setting). One regexp: a call of one costs ~0.1 µs however little it reads.
      TRANSACTION_STATEMENT = /\A#{LEADING}(?:begin|start\s+transaction|set\s+(?:local|transaction|constraints))\b/i
      # BEGIN, START TRANSACTION alone (told apart once TRANSACTION_STATEMENT matched).
      TRANSACTION_START = /\A#{LEADING}(?:begin|start\s+transaction)\b/i
      # COMMIT, END, ROLLBACK, ABORT, PREPARE TRANSACTION (and COMMIT/ROLLBACK PREPARED): the
      # end of the transaction under way. On a shared connection that is a pipeline segment's
      # implicit transaction: a ROLLBACK there undoes the other callers' statements before it
      # in the segment, whose results they were given; a COMMIT commits them, and should a
      # statement after it fail, the segment's statements are sent again (Pipeline) and those
      # run twice. Not in TRANSACTION_STATEMENT: they open nothing that needs a connection held.
      TRANSACTION_END = /\A#{LEADING}(?:commit|end|rollback|abort|prepare\s+transaction)\b/i
      # TRANSACTION_STATEMENT or TRANSACTION_END: what Pool#query looks for first (one regexp
      # for the usual statement, which is neither).
      TRANSACTION_CONTROL = /\A#{LEADING}(?:begin|start\s+transaction|set\s+(?:local|transaction|constraints)|
                             commit|end|rollback|abort|prepare\s+transaction)\b/ix
      # Commands whose effect outlives the statement: SET without LOCAL (and not SET TRANSACTION
      # or SET CONSTRAINTS, which end with the transaction), RESET, DISCARD, LISTEN, UNLISTEN,
      # PREPARE, DEALLOCATE, LOAD, DECLARE (a cursor WITH HOLD), and DO, whose block may do
      # any of these (in dynamic SQL too, out of this test's sight). And COPY, whose data (FROM
      # STDIN, TO STDOUT) travels on the same connection after the statement's answer: on a
      # connection given back at once, or a shared one, the caller could not send or read it,
      # and the connection would be stuck mid-COPY.
      SESSION_WORD = /
        set\b(?!\s+(?:local|transaction|constraints)\b)|reset\b|discard\b|listen\b|unlisten\b|
        prepare\b|deallocate\b|load\b|declare\b|do\b|copy\b
      /ix
      # One of them at the start of any statement of the text.
      SESSION_COMMAND = /#{STATEMENT_START}(?:#{SESSION_WORD})/
      # One of them at the text's start: all SESSION_COMMAND can find in a text without a
      # semicolon, found without trying a match at every character (SESSION_COMMAND's search
      # for a `;` or the start took ~1.4 µs on a Rails INSERT, and it runs for each statement).
      FIRST_SESSION_COMMAND = /\A#{LEADING}(?:#{SESSION_WORD})/
      # Functions whose effect outlives the statement, found by name however they are called
      # (quoted, schema-qualified, a comment before the parenthesis): the session advisory
      # locks (pg_advisory_lock, pg_try_advisory_lock and their _shared forms; not the _xact_
      # ones) and set_config. One literal search each: an alternation of the names in one
      # regexp tries a match at every character that could start one (~0.2 µs on the Rails
      # app's statements, against ~0.07 µs per literal).
      ADVISORY_LOCK = /advisory_lock/i
      SET_CONFIG = /set_config/i
      # A call of set_config whose `is_local` is written `true`: a setting of the transaction
      # under way. Its first two arguments may be string constants, parameters or plain words;
      # anything else it cannot read (a comment or a nested call among the arguments, a
      # parameter for `is_local`) counts as `false`, a change of the session.
      SET_CONFIG_LOCAL = /
        set_config"?\s*\(\s*(?:'(?:[^']|'')*'|[^,()'\/\-]+?)\s*,\s*(?:'(?:[^']|'')*'|[^,()'\/\-]+?)\s*,\s*true\s*\)
      /ix
      # Temporary objects, made anywhere in a statement: CREATE TEMP ... (after EXPLAIN
      # ANALYZE, in a DO block too), SELECT ... INTO TEMP, and anything named in the session's
      # own schema, pg_temp. Looked for only in a text that has TEMP in it (a literal search).
      TEMP = /temp/i
      TEMP_OBJECT = /
        \bpg_temp\b|\binto\s+temp(?:orary)?\b|\bcreate\s+(?:or\s+replace\s+)?(?:(?:global|local)\s+)?temp(?:orary)?\b
      /ix
      # Statements that read or write rows (what ActiveRecord's queries are), as opposed to DDL
      # and utility commands, some of which (CREATE DATABASE, VACUUM, CREATE INDEX
      # CONCURRENTLY) refuse to run in the implicit transaction of a pipeline's segment.
      DATA_STATEMENT = /\A#{LEADING}(?:select|insert|update|delete|with|values|table)\b/i
      # Text in which a semicolon does not end a statement: string constants (E'' ones with
      # backslash escapes), quoted identifiers, dollar-quoted strings and comments.
      QUOTED = /
        (?<![A-Za-z0-9_$])[eE]'(?:[^'\\]|\\.|'')*' | '(?:[^']|'')*' | "(?:[^"]|"")*" |
        (?<![A-Za-z0-9_$])\$([A-Za-z_][A-Za-z0-9_]*|)\$.*?\$\1\$ | --[^\n]* | \/\*.*?\*\/
      /mx

      # Statement texts whose #transaction_role is known, by identity, with their role (NO_ROLE
      # for nil): frozen Strings only, which cannot change, so a text's role stays its own (an
      # application's SQL literals, the same String object on every call; an unfrozen text may
      # be changed between two calls and is tested each time). Two regexps cost ~95 ns on
      # `select 1` (3.3 + YJIT), a look-up here ~25. Emptied once it holds ROLES_KEPT texts, so
      # that texts frozen afresh for each call (an interpolated statement, then frozen) cannot
      # make it grow; texts of more than ROLE_TEXT_MAX bytes are not kept (a bulk insert's
      # megabytes of VALUES would stay alive here until the next emptying).
      ROLES = {}.compare_by_identity
      # Texts ROLES holds at most.
      ROLES_KEPT = 512
      # Bytes of a text ROLES keeps, at most.
      ROLE_TEXT_MAX = 4096
      # What ROLES holds for a text with no role (nil would read as unknown).
      NO_ROLE = :none
      private_constant :ROLES, :NO_ROLE

      module_function

      # @param sql [String]
      # @return [Boolean] whether the statement opens a transaction or sets the one under way
      #   (SET LOCAL and the like): either needs a connection of the caller's own (a setting
      #   sent outside a transaction then changes nothing, as PostgreSQL warns)
      def transaction_statement?(sql)
        TRANSACTION_STATEMENT.match?(sql)
      end

      # What a statement is to the transaction and the session it runs in, for Pool#query,
      # which sends one statement: one that opens a transaction (:start), one that sets the
      # transaction under way (:setting: SET LOCAL, SET TRANSACTION, SET CONSTRAINTS, or
      # set_config(..., true)), one that ends it (:end: COMMIT, ROLLBACK and the like,
      # TRANSACTION_END), one that leaves state in the session (:session, #session_state?: SET,
      # LISTEN, COPY, a session advisory lock, a temporary table..., and a set_config whose
      # `is_local` is not written `true`: SET_CONFIG_LOCAL), or none of these (nil). Remembered for frozen texts, so that the
      # usual answer costs a look-up.
      # @param sql [String]
      # @return [Symbol, nil] :start, :setting, :end, :session or nil
      def transaction_role(sql)
        return role_of(sql) unless sql.frozen?
        role = ROLES[sql]
        return role.equal?(NO_ROLE) ? nil : role if role
        return role_of(sql) if sql.bytesize > ROLE_TEXT_MAX
        ROLES.clear if ROLES.size >= ROLES_KEPT
        role = role_of(sql)
        ROLES[sql] = role || NO_ROLE
        role
      end

      # #transaction_role, told from the text.
      def role_of(sql)
        if TRANSACTION_CONTROL.match?(sql)
          if TRANSACTION_START.match?(sql) then :start
          elsif TRANSACTION_END.match?(sql) then :end
          else :setting
          end
        elsif SET_CONFIG.match?(sql)
          local_set_config?(sql) ? :setting : :session
        elsif session_change?(sql)
          :session
        end
      end
      private_class_method :role_of

      # Whether each set_config in the text sets the transaction's value only (SET_CONFIG_LOCAL):
      # `set_config(..., false)`, or an `is_local` the text does not show, changes the session.
      def local_set_config?(sql)
        sql.scan(SET_CONFIG).size == sql.scan(SET_CONFIG_LOCAL).size
      end
      private_class_method :local_set_config?

      # @param sql [String]
      # @return [Boolean] whether the statement ends the transaction under way (TRANSACTION_END)
      def transaction_end?(sql)
        TRANSACTION_END.match?(sql)
      end

      # @param sql [String]
      # @return [Boolean] whether the text is one statement that reads or writes rows, which
      #   may then go through the extended protocol (it carries one statement only) and share
      #   a pipelined connection. Errs towards false: quoting it cannot follow, like a nested
      #   comment, leaves a semicolon in sight.
      def single_data_statement?(sql)
        return false unless DATA_STATEMENT.match?(sql)
        return true unless sql.include?(";")
        !sql.gsub(QUOTED, " ").sub(/;\s*\z/, "").include?(";")
      end

      # @param sql [String]
      # @return [Boolean] whether the statement (or one of several) leaves state in the session
      def session_state?(sql)
        SET_CONFIG.match?(sql) || session_change?(sql)
      end

      # #session_state? but for set_config, which #role_of has looked for already.
      def session_change?(sql)
        (sql.include?(";") ? SESSION_COMMAND : FIRST_SESSION_COMMAND).match?(sql) || ADVISORY_LOCK.match?(sql) ||
          (TEMP.match?(sql) && TEMP_OBJECT.match?(sql))
      end
      private_class_method :session_change?
    end
  end
end
