# frozen_string_literal: true

module ActiveRecord
  module ConnectionAdapters
    module WeftPostgreSQL
      # Which statements cannot share a connection with other callers' statements: those that
      # open a transaction (the statements that follow belong to it) and those that leave state
      # in the session (the next caller on that connection would inherit it). The adapter runs
      # these on a connection of its own (see RoutedConnection).
      #
      # The test is on the SQL text, so it is deliberately broad: a false match only costs a
      # connection held a little longer, a miss would leak state into the shared pool. Leading
      # comments (query log tags) are skipped; each statement of a multi-statement string counts.
      module StatementScope
        # Whitespace and comments before a statement's first word.
        LEADING = %r{(?:\s|--[^\n]*(?:\n|\z)|/\*.*?\*/)*}m
        # Where a statement starts: the text's start or after a semicolon.
        STATEMENT_START = /(?:\A|;)#{LEADING}/
        # BEGIN, START TRANSACTION.
        TRANSACTION_START = /\A#{LEADING}(?:begin|start\s+transaction)\b/i
        # Commands whose effect outlives the statement: SET without LOCAL (and not SET TRANSACTION
        # or SET CONSTRAINTS, which end with the transaction), RESET, DISCARD, LISTEN, UNLISTEN,
        # PREPARE, DEALLOCATE, LOAD, DECLARE (a cursor WITH HOLD), CREATE TEMP objects.
        SESSION_COMMAND = /
          #{STATEMENT_START}
          (?:set\b(?!\s+(?:local|transaction|constraints)\b)|reset\b|discard\b|listen\b|unlisten\b|
             prepare\b|deallocate\b|load\b|declare\b|
             create\s+(?:or\s+replace\s+)?(?:(?:global|local)\s+)?temp(?:orary)?\b)
        /ix
        # Functions whose effect outlives the statement: session advisory locks, set_config.
        SESSION_FUNCTION = /\b(?:pg_(?:try_)?advisory_lock(?:_shared)?|set_config)\s*\(/i

        module_function

        # @param sql [String]
        # @return [Boolean] whether the statement opens a transaction
        def transaction_start?(sql)
          TRANSACTION_START.match?(sql)
        end

        # @param sql [String]
        # @return [Boolean] whether the statement (or one of several) leaves state in the session
        def session_state?(sql)
          SESSION_COMMAND.match?(sql) || SESSION_FUNCTION.match?(sql)
        end
      end
    end
  end
end
