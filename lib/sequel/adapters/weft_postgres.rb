# frozen_string_literal: true

require "sequel/core"
require "sequel/adapters/postgres"
require_relative "../../weft/postgres"
require_relative "weft_postgres/connection_pool"

module Sequel
  # Sequel's postgres adapter on a Weft::Postgres::Pool: statements outside a transaction share
  # the pool's few connections among all fibers (pipelined when connections run short), while
  # DB.transaction and DB.synchronize pin one connection to the fiber for their block.
  #
  #   DB = Sequel.connect("weft-postgres://user@host/db?max_connections=5")
  #   DB = Sequel.connect(adapter: :weft_postgres, conn_str: ENV["DATABASE_URL"], limit: 5)
  #
  # Everything else is the postgres adapter's: its connection setup, type conversion of
  # results, transactions and savepoints, prepared statements, COPY, LISTEN. See the Sequel
  # section of Weft's docs/postgres.md.
  module WeftPostgres
    # A Sequel::Postgres::Database whose statements go through its pool's Weft::Postgres::Pool.
    class Database < Sequel::Postgres::Database
      set_adapter_scheme :"weft-postgres" # the URL scheme (URL schemes cannot hold "_")
      set_adapter_scheme :weft_postgres

      # @return [Weft::Postgres::Pool] the pool under this Database; statements given to it
      #   directly share its connections with Sequel's
      def weft_pool
        pool.weft_pool
      end

      # Runs a statement. Outside DB.synchronize and DB.transaction, one statement that reads or
      # writes rows, and leaves nothing in the session, goes through the Weft pool's #query, on whichever connection the pool picks
      # (a set_config in a pipeline segment of its own, so that it holds for no other fiber's
      # statements: see Weft::Postgres::Pool#query). Inside them such a statement with bound
      # variables goes through #query too, which runs it on the connection the fiber holds, as
      # the pool's named prepared statement the second time its text runs there (see
      # Weft::Postgres::PreparedStatements; Sequel's literal SQL, whose values are in the text,
      # would gain nothing). Sequel's own prepared statements (which live on one connection),
      # and any other SQL, run as the postgres adapter runs them,
      # on a connection the fiber holds: the simple protocol takes several statements in one
      # string (the last one's result answers), commands such as VACUUM refuse the implicit
      # transaction of a pipeline's segment, and a change of the session (a session advisory
      # lock taken in a SELECT, say) stays with the connection it was made on, as with the
      # postgres adapter (Pool#query refuses it).
      #
      # A held statement interrupted by Weft.deadline, a timeout or a cancelled task is cancelled
      # on the server before the error goes on: the ROLLBACK that DB.transaction sends next would
      # otherwise wait for the statement to end.
      # @see Sequel::Postgres::Database#execute
      def execute(sql, opts = OPTS, &block)
        if !sql.is_a?(Symbol) && (!pool.held_connection || opts[:arguments]) && shared_statement?(sql)
          return check_database_errors { execute_shared(sql, opts[:arguments], &block) }
        end

        synchronize(opts[:server]) do |conn|
          super
        rescue Exception # rubocop:disable Lint/RescueException
          cancel_running(conn)
          raise
        end
      end

      # DDL and DB.run run on a held connection, as the postgres adapter runs them: the SQL may
      # hold several statements, which only PostgreSQL's simple query protocol takes (Weft's
      # #query, like any pipeline, uses the extended one).
      def execute_ddl(sql, opts = OPTS, &block)
        synchronize(opts[:server]) { super }
      end

      # Only a fiber holding a connection can be in a transaction, so the answer for any other
      # needs no connection.
      def in_transaction?(opts = OPTS)
        !pool.held_connection.nil? && super
      end

      # Opens a connection as the postgres adapter does (its type map for queries, client
      # encoding and SETs; #new_connection adds :after_connect and :connect_sqls), on the
      # conninfo the Weft pool settled on: the options' parameters plus its connect_timeout,
      # statement_timeout and application_name.
      def connect(_server)
        super({ conn_str: weft_pool.settings.conninfo })
      end

      private

      # Checks what the adapter relies on: its own pool, and standard_conforming_strings on
      # every connection (Dataset escapes strings without asking a connection).
      def adapter_initialize
        super
        raise Error, "the weft_postgres adapter needs its own pool; do not give :pool_class" unless pool.is_a?(ConnectionPool)
        return if typecast_value_boolean(@opts.fetch(:force_standard_strings, true))

        raise Error, "the weft_postgres adapter needs force_standard_strings (the default)"
      end

      def connection_pool_default_options
        { pool_class: ConnectionPool }
      end

      def dataset_class_default
        Dataset
      end

      # Asks the server to cancel the statement still running on a connection, if one is (the
      # caller was interrupted while it ran); what it sends back is read by the next statement.
      def cancel_running(conn)
        conn.cancel if conn.transaction_status == PG::PQTRANS_ACTIVE
      rescue PG::Error, IOError, SystemCallError
        nil # the interruption says more; the Weft pool sees to the connection when the hold ends
      end

      # Whether #execute sends `sql` through the Weft pool's #query: one statement that reads or
      # writes rows and leaves nothing in the session.
      def shared_statement?(sql)
        scope = Weft::Postgres::StatementScope
        scope.single_data_statement?(sql) && !scope.session_state?(sql)
      end

      # Hands the result on as Sequel::Postgres::Adapter#execute does: to the block, else the
      # number of rows changed.
      def execute_shared(sql, args)
        args = args&.map { |arg| bound_variable_arg(arg, nil) }
        pool = weft_pool
        result = log_connection_yield(sql, nil, args) { args ? pool.query_stateless(sql, args) : pool.query_stateless(sql) }
        begin
          defined?(yield) ? yield(result) : result.cmd_tuples
        ensure
          result.clear
        end
      end
    end

    # A Sequel::Postgres::Dataset that escapes literals without a connection.
    class Dataset < Sequel::Postgres::Dataset
      private

      # The postgres adapter's dataset asks a connection to escape each string literal
      # (DB.synchronize), which here would pin a connection for every query with a string in it.
      # Sequel's shared PostgreSQL code escapes in Ruby instead, which gives the same SQL under
      # standard_conforming_strings (Database#adapter_initialize insists on it).
      def literal_string_append(sql, value)
        Sequel::Postgres::DatasetMethods.instance_method(:literal_string_append).bind_call(self, sql, value)
      end

      # As #literal_string_append, for blobs (bytea in escape format, which PostgreSQL reads as
      # it reads the connection's hex format).
      def literal_blob_append(sql, value)
        Sequel::Postgres::DatasetMethods.instance_method(:literal_blob_append).bind_call(self, sql, value)
      end
    end
  end
end
