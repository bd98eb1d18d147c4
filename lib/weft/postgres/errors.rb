# frozen_string_literal: true

require "pg"
require_relative "../errors"

module Weft
  module Postgres
    # The base of the errors Weft::Postgres raises about the pool itself. Errors from the
    # database (a syntax error, a unique violation...) are PG::Error subclasses, as with `pg`.
    class Error < Weft::Error; end

    # No connection became free within the pool's checkout timeout.
    class PoolTimeout < Error; end

    # COMMIT found the transaction failed (an error inside Pool#transaction's block was
    # rescued there), so PostgreSQL rolled it back.
    class TransactionRolledBack < Error; end

    # The pool was closed and cannot be used any more.
    class PoolClosed < Error; end

    # The server could not be reached, or a connection to it was lost while a query was in
    # flight. It is a PG::ConnectionBad, so `rescue PG::Error` still catches every database
    # failure; the message names the server's host and port.
    class ConnectionError < PG::ConnectionBad; end
  end
end
