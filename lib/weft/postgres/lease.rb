# frozen_string_literal: true

require_relative "errors"

module Weft
  module Postgres
    # A connection taken from a Pool for one holder until it is given back: what Pool#with does
    # for a block, for holders whose use of a connection does not fit in one block (an ORM
    # begins a transaction in one method call and commits it in another).
    #
    #   lease = pool.lease
    #   begin
    #     lease.async_exec("BEGIN") ...
    #   ensure
    #     lease.release
    #   end
    #
    # Unlike #with, a lease belongs to no fiber: whoever holds the object uses the connection, and
    # Pool#query from the same fiber does not run on it. The holder must release it; a lease
    # dropped unreleased keeps its connection out of the pool for good.
    class Lease
      # @param pool [Pool] the pool the connection goes back to
      # @param connection [Connection] taken for this lease
      def initialize(pool, connection)
        @pool = pool
        @connection = connection
        @released = false
      end

      # @return [PG::Connection] the leased connection, in plain (not pipeline) mode
      # @raise [PoolClosed] once the lease was released: the connection may be someone else's now
      def raw
        raise PoolClosed, "the lease was released; its connection is back in the pool" if @released
        @connection.raw
      end

      # Runs a statement with parameters, as PG::Connection#exec_params does, answering sooner
      # while connections are short (see Pool#await_answer). A text run on this connection
      # before goes as the pool's named prepared statement, inside a transaction block too
      # (Weft::Postgres::PreparedStatements#plain_statement says what may be named there),
      # unless the pool prepares none.
      # @param sql [String] one statement
      # @param params [Array]
      # @return [PG::Result]
      # @raise [PG::Error] the statement's
      def exec_params(sql, params)
        statements = @connection.statements
        statement = statements&.plain_statement(raw, sql, params)
        if statement
          begin
            return answer { |raw| raw.send_query_prepared(statement.name, params) }
          rescue PG::Error => e
            raise unless statements.retry_unnamed?(statement, e, raw)
          end
        end
        result = answer { |raw| raw.send_query_params(sql, params) }
        statements&.forget_deallocated(sql)
        result
      end

      # Runs SQL in the simple protocol (possibly several statements), as
      # PG::Connection#async_exec does, answering sooner while connections are short (see
      # Pool#await_answer). A DEALLOCATE or DISCARD ALL among them makes the pool forget the
      # named statements it may have deallocated, even when a statement of the text failed
      # (one before it may have run): a statement forgotten but kept costs server memory, one
      # kept but gone would fail the holder's next transaction.
      # @param sql [String]
      # @return [PG::Result] the last statement's result
      # @raise [PG::Error] the first failing statement's
      def async_exec(sql)
        answer { |raw| raw.send_query(sql) }
      ensure
        @connection.statements&.forget_deallocated(sql)
      end

      # Gives the connection back. One left mid-statement or mid-transaction is made usable first
      # (cancel, rollback) or closed, as Pool#with does. With `reset_session: true` the session is
      # also cleared (`DISCARD ALL`: settings, temporary tables, prepared statements, advisory
      # locks, LISTENs) and the pool's `on_connect` runs on it again, so that the next holder
      # finds it as if new; when that fails the connection is closed instead. Releasing twice
      # does nothing.
      # @param reset_session [Boolean] whether the holder changed session state
      # @return [void]
      def release(reset_session: false)
        return if @released
        @released = true
        @pool.return_lease(@connection, reset_session)
        nil
      end

      # @return [Boolean]
      def released?
        @released
      end

      private

      # Sends what the block sends on the raw connection (results of an earlier statement
      # dropped first, as PG::Connection#exec does), waits for the answer (Pool#await_answer,
      # then libpq's own wait) and returns its last result.
      def answer
        raw = self.raw
        raw.discard_results
        yield raw
        @pool.await_answer(raw)
        raw.get_last_result
      end
    end
  end
end
