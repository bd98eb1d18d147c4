# frozen_string_literal: true

require "cgi"
require "json"
require "net/http"
require "securerandom"
require "tmpdir"

module Ringpool
  module Test
    # Fresh databases, shards and HTTP calls for the app's tests.
    module Helpers
      # A new, empty database on the shared throwaway cluster, migrated. @return [String] its URL
      def fresh_database(cluster = postgres)
        url = cluster.create_database("ringpool_#{SecureRandom.hex(6)}")
        with_db(url) { |db| Ringpool::Schema.migrate(db) }
        url
      end

      # Runs the block in a reactor with a pool on `url`, closed afterwards.
      def with_db(url, limit: 4)
        db = Weft::Postgres::Pool.new(url, limit: limit)
        Weft.run { yield db }
      ensure
        db&.close
      end

      # `count` E.164 numbers this test has not used yet (each test has a database of its own).
      def numbers(count)
        first = @numbers_used ||= 0
        @numbers_used += count
        Array.new(count) { |index| format("+1555%07d", first + index) }
      end

      # Runs one shard in this process, on a thread of its own, the way config/weft.rb does in a
      # worker: its public API on a TCP port, and Shard#run (peer socket, ownership) as the
      # server's worker_task. Yields the port; stops it gracefully afterwards.
      def with_shard(database_url, deadline: 2.0, interval: 0.2)
        Dir.mktmpdir("ringpool") do |dir|
          settings = Ringpool::Settings.new(database_url: database_url, socket_dir: dir, deadline: deadline,
                                            ownership_interval: interval, db_pool_size: 4)
          shard = Ringpool::Shard.new(settings)
          server = Weft::Server.new(shard.api, binds: ["tcp://127.0.0.1:0"], shutdown_timeout: 5,
                                               worker_task: [->(_server) { shard.run(settings.shard_url(0)) }])
          thread = Thread.new { server.run }
          thread.report_on_exception = false
          port = server.listeners.first.port.to_i
          begin
            wait_until(10, "the shard's first ownership tick") { api(port, :get, "/health").last["shard"] }
            yield port, shard
          ensure
            server.stop
            thread.join(15) or flunk("the shard did not stop within 15 s")
            thread.value
          end
        end
      end

      # One HTTP request. @return [(Integer, Object)] status and parsed JSON body
      def api(port, method, path, body = nil, raw: nil)
        Net::HTTP.start("127.0.0.1", port, open_timeout: 5, read_timeout: 30) do |http|
          request = method == :get ? Net::HTTP::Get.new(path) : Net::HTTP::Post.new(path)
          if method != :get
            request.body = raw || JSON.generate(body)
            request["content-type"] = "application/json"
          end
          response = http.request(request)
          [Integer(response.code), (JSON.parse(response.body) rescue response.body)] # rubocop:disable Style/RescueModifier
        end
      end

      # Creates a pool over the API. @return [Hash] the pool as the API shows it
      def create_pool(port, count: 2, lockout: 60, overflow: "+15550999999")
        status, body = api(port, :post, "/ring_pools", { "numbers" => numbers(count), "overflow_number" => overflow, "lockout_seconds" => lockout })
        assert_equal 201, status, body.inspect
        body
      end

      # POST /allocations. @return [Array<Hash>] the per-item answers
      def allocate(port, items)
        status, body = api(port, :post, "/allocations", { "allocations" => items })
        assert_equal 200, status, body.inspect
        body.fetch("allocations")
      end

      def wait_until(timeout, what)
        deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + timeout
        loop do
          value = begin
            yield
          rescue StandardError
            nil
          end
          return value if value
          flunk("#{what}: not within #{timeout} s") if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
          sleep 0.05
        end
      end

      # Rows of SQL on `url`, as hashes of strings.
      def sql(url, statement, *params)
        conn = PG.connect(url)
        conn.exec_params(statement, params).to_a
      ensure
        conn&.close
      end
    end
  end
end
