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
    #     lease.raw.exec("BEGIN") ...
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
    end
  end
end
