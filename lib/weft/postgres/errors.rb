# frozen_string_literal: true

require "pg"
require_relative "../errors"

module Weft
  module Postgres
    # Included by the errors Weft::Postgres raises about the pool itself, so
    # `rescue Weft::Postgres::Error` catches them all (and, as it includes Weft::Error, so does
    # `rescue Weft::Error`). A module, since the pool's timeout must also be a Timeout::Error and
    # the connection error a PG::ConnectionBad. Errors from the database (a syntax error, a unique
    # violation...) are PG::Error subclasses, as with `pg`.
    module Error
      include Weft::Error
    end

    # No connection became free within the pool's acquire timeout. A Weft::TimeoutError (and so a
    # Timeout::Error), as are the timeouts of Weft::Pool and of the HTTP client's pools.
    class PoolTimeout < Weft::TimeoutError
      include Error
    end

    # COMMIT found the transaction failed (an error inside Pool#transaction's block was
    # rescued there), so PostgreSQL rolled it back.
    class TransactionRolledBack < StandardError
      include Error
    end

    # The pool was closed and cannot be used any more.
    class PoolClosed < StandardError
      include Error
    end

    # PostgreSQL answered a pipelined statement with no result at all, which the protocol does
    # not allow: whether the statement ran is unknown.
    class MissingResult < StandardError
      include Error
    end

    # The server could not be reached, or a connection to it was lost while a query was in
    # flight. It is a PG::ConnectionBad, so `rescue PG::Error` still catches every database
    # failure; the message names the server's host and port.
    class ConnectionError < PG::ConnectionBad
      include Error
    end
  end
end
