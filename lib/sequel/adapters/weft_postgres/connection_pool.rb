# frozen_string_literal: true

module Sequel
  module WeftPostgres
    # The weft_postgres adapter's connection pool: Sequel's pool API (hold, disconnect, size,
    # max_size, servers) over a Weft::Postgres::Pool, which it builds from the Database options.
    #
    # #hold, which Sequel calls for DB.synchronize, DB.transaction and everything else that
    # needs one session, pins one of the Weft pool's connections for the block. Single
    # statements outside a hold never come here: the adapter's Database#execute hands them to
    # the Weft pool's #query, which shares connections among fibers (pipelined under pressure).
    # A pool class alone could not do that: Sequel asks its pool for a connection for every
    # statement and every transaction alike, and a pool cannot tell them apart.
    #
    # Holds are per fiber, so Sequel's fiber_concurrency extension is not needed. The Weft pool
    # opens its connections through Sequel (Database#new_connection), so each one gets the
    # postgres adapter's setup, :after_connect and :connect_sqls.
    class ConnectionPool < Sequel::ConnectionPool
      # Weft::Postgres::Pool options taken from the Database options, with the type each is
      # converted to (a URL's query string gives strings).
      WEFT_OPTIONS = {
        limit: :integer, pipelining: :boolean, pipeline_depth: :integer, acquire_timeout: :float,
        connect_timeout: :float, statement_timeout: :float, max_age: :float, idle_timeout: :float,
        application_name: :string,
      }.freeze
      # Sequel's own names for two of them, honoured when the Weft name is not given.
      SEQUEL_NAMES = { limit: :max_connections, acquire_timeout: :pool_timeout }.freeze

      # @return [Weft::Postgres::Pool] the pool the Database's statements go through
      attr_reader :weft_pool

      # @param db [Sequel::WeftPostgres::Database]
      # @param opts [Hash] the Database options: where to connect as for the postgres adapter
      #   (:host, :port, :database, :user, :password, :sslmode, :sslrootcert, :driver_options,
      #   or :conn_str, which may be a URL; none of them: DATABASE_URL), and WEFT_OPTIONS
      def initialize(db, opts = OPTS)
        super
        raise Error, "the weft_postgres adapter does not support sharding (the :servers option)" if opts[:servers]
        @weft_pool = Weft::Postgres::Pool.new(target(opts), **weft_options(opts), connector: method(:open_connection))
        @held_key = :"sequel_weft_postgres_held_#{object_id}"
        @sync = Thread::Mutex.new
      end

      # Yields a connection pinned to the calling fiber until the block ends (the same one to a
      # nested call), as Sequel's pools yield one per thread.
      # @param _server [Symbol] only :default exists
      # @yieldparam conn [Sequel::Postgres::Adapter]
      # @return the block's value
      def hold(_server = nil)
        if (conn = held_connection)
          return yield(conn)
        end

        @weft_pool.with do |conn|
          Thread.current[@held_key] = conn # fiber-local
          begin
            yield conn
          ensure
            Thread.current[@held_key] = nil
          end
        end
      end

      # @return [Sequel::Postgres::Adapter, nil] the connection the calling fiber holds (inside
      #   #hold), if any
      def held_connection
        Thread.current[@held_key]
      end

      # Closes the connections not in use; the pool opens new ones as it needs them.
      # @return [nil]
      def disconnect(_opts = OPTS)
        @weft_pool.close_idle
      end

      # @return [Integer] connections open or opening
      def size
        @weft_pool.statistics[:size]
      end

      # @return [Integer] the most connections the pool opens (the Weft pool's limit)
      def max_size
        @weft_pool.limit
      end

      # @return [Symbol]
      def pool_type
        :weft_postgres
      end

      private

      # Runs the block under the pool's lock, as Sequel's threaded pools do: what the
      # connection_validator extension calls as it loads, to set its defaults. The extension then
      # loads and does nothing more (the methods it wraps are the threaded pools' own, which this
      # pool does not have): the Weft pool checks a connection before use and replaces a broken
      # one itself.
      def sync(&block)
        @sync.synchronize(&block)
      end

      # Called by the Weft pool for each connection it opens. Sequel opens it on the conninfo
      # the Weft pool settled on (see Database#connect), so the argument is not needed here.
      def open_connection(_conninfo)
        make_new(:default)
      end

      # The libpq parameters named by the options, as the postgres adapter reads them; nil when
      # there are none, so the Weft pool falls back on DATABASE_URL and libpq's PG* defaults.
      def target(opts)
        return opts[:conn_str] if opts[:conn_str]

        params = { host: opts[:host], port: opts[:port], dbname: opts[:database], user: opts[:user],
                   password: opts[:password], sslmode: opts[:sslmode], sslrootcert: opts[:sslrootcert] }
        params.merge!(opts[:driver_options]) if opts[:driver_options]
        params.delete_if { |_name, value| value.nil? || value.to_s.empty? }
        params unless params.empty?
      end

      def weft_options(opts)
        WEFT_OPTIONS.each_with_object({}) do |(name, type), options|
          value = opts.fetch(name) { opts[SEQUEL_NAMES[name]] }
          options[name] = db.typecast_value(type, value) unless value.nil?
        end
      end
    end
  end
end
