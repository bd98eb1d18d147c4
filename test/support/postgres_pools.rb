# frozen_string_literal: true

module Weft
  module Test
    # For the tests of Weft::Postgres::Pool: pools closed after each test, a reactor that fails a
    # hung test, and a look at the statements running on the server (on a connection of its own).
    #
    #   include Weft::Test::PostgresPools
    #   db = pool(limit: 2)
    #   reactor { db.query("select 1") }
    module PostgresPools
      def setup
        super
        @pools = []
      end

      def teardown
        @pools.each(&:close)
        @monitor&.close
        @proxy&.close
        super
      end

      # @return [Weft::Postgres::Pool] on the test cluster (or `target`), closed after the test
      def pool(target: postgres.url, **options)
        Weft::Postgres::Pool.new(target, **options).tap { |created| @pools << created }
      end

      # @return [Weft::Postgres::Pool] a pool whose connections (and cancel requests) go through
      #   a HoldingProxy (@proxy), which can hold them up; both closed after the test
      def proxied_pool(**options)
        @proxy = Weft::Test::HoldingProxy.new(postgres.host, postgres.port)
        pool(target: "postgres://postgres@127.0.0.1:#{@proxy.port}/postgres?sslmode=disable&gssencmode=disable", **options)
      end

      # Runs the block in a reactor, failing it after `seconds`.
      def reactor(seconds = 20, &block)
        Weft.run { Weft.timeout(seconds, &block) }
      end

      def now
        Weft::Timers.now
      end

      # Statements running on the server whose text contains `tag` (the tag travels as a
      # parameter, so this query does not find itself).
      def active(tag)
        @monitor ||= PG.connect(postgres.conninfo)
        @monitor.exec_params(<<~SQL, [tag]).getvalue(0, 0).to_i
          select count(*) from pg_stat_activity
           where state = 'active' and pid <> pg_backend_pid() and position($1 in query) > 0
        SQL
      end

      # Polls until no statement with `tag` runs on the server; fails after `within` seconds.
      def assert_gone_from_server(tag, within: 1.0)
        started = now
        sleep 0.01 while active(tag).positive? && now - started < within
        assert_equal 0, active(tag), "a statement tagged #{tag} still runs on the server after #{within}s"
      end
    end
  end
end
