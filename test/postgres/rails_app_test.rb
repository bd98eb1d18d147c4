# frozen_string_literal: true

require_relative "../test_helper"
require "json"
require "net/http"
require "open3"
require "rbconfig"

# Issue #12's Rails proof: a Rails app (test/postgres/apps/rails_app: models, migrations,
# a uniqueness validation, a transaction, `includes`) under `weft serve -w 0` on
# `adapter: weft_postgresql` with `pool: 5`, set up by Rails' own db: tasks, takes 200
# concurrent requests that each run five queries and `pg_sleep(0.05)`. On the test's own bundle:
# Rails 7.2 on Ruby 3.1, 8.1 on 3.3, and 7.1 in bin/test's Rails 7.1 step (gemfiles/rails71.gemfile).
class PostgresRailsAppTest < Minitest::Test
  include Weft::Test::WeftServe
  ROOT = File.expand_path("../..", __dir__)
  APP = File.join(__dir__, "apps/rails_app")
  DATABASE = "weft_rails_app"
  POOL = 5
  REQUESTS = 200
  # The author the warm-up and the validation checks post to, apart from the 200 measured ones.
  SPARE_AUTHOR = REQUESTS + 1
  # A connection runs one statement at a time, so 200 sleeps of 0.05 s on 5 connections need
  # 2 s at least; one after another they would need 10 s. 8 s leaves room for Rails' own work
  # (a few ms of CPU per request on 2 shared cores) and a loaded machine, and still fails if the
  # sleeps ran on fewer than 2 connections at a time.
  TIME_BOUND = 8.0

  def watchdog_timeout
    120
  end

  def test_two_hundred_concurrent_requests_on_five_postgresql_connections
    skip "Weft's server (exe/weft) is not available" unless File.exist?(File.join(ROOT, "exe/weft"))
    rails("db:create", "db:migrate", "db:seed")
    serve do |port, log|
      assert_equal Gem.loaded_specs.fetch("railties").version.to_s, rails_version(port), "not this bundle's Rails"
      assert_validation_queries(port)
      responses = nil
      started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      backends = watch_backends do
        responses = assert_elapsed_under(TIME_BOUND, "#{REQUESTS} requests x pg_sleep(0.05) on #{POOL} connections " \
                                                     "(2 s at best)") do
          Array.new(REQUESTS) { |number| Thread.new { create_post(port, number + 1, "post #{number + 1}") } }
               .map(&:value)
        end
      end
      if ENV["VERBOSE"]
        puts format("\n%d requests, pool %d: %.2fs, at most %d backends", REQUESTS, POOL,
                    Process.clock_gettime(Process::CLOCK_MONOTONIC) - started, backends.max)
      end
      responses.each.with_index(1) do |(code, body), number|
        assert_equal "201", code, body
        post = JSON.parse(body)
        assert_equal "post #{number}", post["title"]
        assert_equal [["Author #{number}", "post #{number}"]], post["recent"], "the author's posts, with `includes`"
      end
      refute_match(/ConnectionTimeoutError|PoolTimeout/, File.read(log))
      assert_operator backends.max, :<=, POOL, "PostgreSQL saw more than #{POOL} connections of the app"
      assert_operator backends.max, :>=, 1, "no connection of the app was seen while the requests ran"
    end
    assert_equal [{ "posts" => (REQUESTS + 1).to_s }], postgres.psql("select count(*) as posts from posts", dbname: DATABASE)
  end

  private

  # A post for an author that has none yet, then the same title again: the uniqueness
  # validation's query finds the first and the second is refused.
  def assert_validation_queries(port)
    code, body = create_post(port, SPARE_AUTHOR, "warm-up")
    assert_equal "201", code, body
    code, body = create_post(port, SPARE_AUTHOR, "warm-up")
    assert_equal "422", code, body
    assert_equal({ "errors" => { "title" => ["has already been taken"] } }, JSON.parse(body))
  end

  # @return [String] the Rails version the app runs on
  def rails_version(port)
    Net::HTTP.start("127.0.0.1", port, open_timeout: 10, read_timeout: 30) { |http| http.get("/version").body }
  end

  # @return [Array(String, String)] the response's status code and body
  def create_post(port, author, title)
    response = Net::HTTP.start("127.0.0.1", port, open_timeout: 10, read_timeout: 30) do |http|
      http.post("/authors/#{author}/posts", URI.encode_www_form(title: title),
                "content-type" => "application/x-www-form-urlencoded")
    end
    [response.code, response.body]
  end

  def environment
    { "RAILS_ENV" => "production", "DB_POOL" => POOL.to_s, "SEED_AUTHORS" => SPARE_AUTHOR.to_s,
      "DATABASE_URL" => postgres.url(DATABASE).sub("postgres://", "weft-postgresql://") }
  end

  # Runs Rails' tasks (the app's Rakefile) in a process of their own.
  def rails(*tasks)
    output, status = Open3.capture2e(environment, RbConfig.ruby, Gem.bin_path("rake", "rake"), *tasks, chdir: APP)
    assert status.success?, "rake #{tasks.join(' ')} failed:\n#{output}"
  end

  # Runs `weft serve -w 0` on the app and yields its port and the path of its log.
  def serve(&block)
    serve_rackup(File.join(APP, "config.ru"), env: environment, &block)
  end

  # The client backends connected to the app's database (autovacuum's workers visit it too),
  # counted every 10 ms from the `postgres` database while the block runs.
  # @return [Array<Integer>] the counts seen
  def watch_backends(&block)
    postgres.count_backends_while("datname = $1 and backend_type = 'client backend'", [DATABASE], &block)
  end
end
