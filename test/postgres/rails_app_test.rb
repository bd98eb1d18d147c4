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
  # The requests' sleeps are proved to overlap by PostgreSQL's own view: pg_stat_activity shows
  # two or more of them running at once. The test once bounded the 200 requests' time instead
  # (8 s, against 10 s for the sleeps one after another), but most of that time is Rails' CPU in
  # the one server process, which a loaded machine stretches: 10.6 s at load 5-7, 19 s under
  # Rails 7.1, with the sleeps overlapping all the same.
  SLEEP_QUERY = "%pg_sleep%"
  # Seconds the app may take to boot (eager loading in production) before it listens: over 30 at
  # load 9 (5 busy loops beside the test on 2 cores). A bound for a server that never listens.
  BOOT_WAIT = 90
  # Seconds a request's answer may take: the 200 requests are answered one after another by the
  # one server process (its CPU), and at load 9 the last waited over 30 s. A bound for a server
  # that never answers.
  READ_TIMEOUT = 120
  # Seconds a request's transaction may wait for one of the 5 connections (the app's
  # checkout_timeout; ActiveRecord's default is 5). 200 transactions queue for them at once, each
  # holding its connection across the reactor turns of its statements, and a turn runs the other
  # requests' Rails code: where this process gets a fifth of a core (load 9), the last ones
  # waited over 5 s (Weft::Postgres::PoolTimeout: 51 of 200, "5 pinned, 187 waiting"). A bound
  # for connections that never come back.
  CHECKOUT_TIMEOUT = 60

  def watchdog_timeout
    240
  end

  def test_two_hundred_concurrent_requests_on_five_postgresql_connections
    skip "Weft's server (exe/weft) is not available" unless File.exist?(File.join(ROOT, "exe/weft"))
    rails("db:create", "db:migrate", "db:seed")
    # Rails' own migration tasks on one PostgreSQL connection: the migrator's advisory lock and
    # the migrations share it (docs/postgres.md, "Migrations with few connections").
    rails("db:migrate:redo", pool: 1)
    serve do |port, log|
      assert_equal Gem.loaded_specs.fetch("railties").version.to_s, rails_version(port), "not this bundle's Rails"
      assert_validation_queries(port)
      responses = sleeping = nil
      started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      backends = watch_backends do
        sleeping = watch_sleeps do
          responses = Array.new(REQUESTS) { |number| Thread.new { create_post(port, number + 1, "post #{number + 1}") } }
                           .map(&:value)
        end
      end
      if ENV["VERBOSE"]
        puts format("\n%d requests, pool %d: %.2fs, at most %d backends, %d sleeping at once", REQUESTS, POOL,
                    Process.clock_gettime(Process::CLOCK_MONOTONIC) - started, backends.max, sleeping.max)
      end
      responses.each.with_index(1) do |(code, body), number|
        assert_equal "201", code, -> { "#{body}\nthe server's log:\n#{server_errors(log)}" }
        post = JSON.parse(body)
        assert_equal "post #{number}", post["title"]
        assert_equal [["Author #{number}", "post #{number}"]], post["recent"], "the author's posts, with `includes`"
      end
      refute_match(/ConnectionTimeoutError|PoolTimeout/, File.read(log))
      assert_operator backends.max, :<=, POOL, "PostgreSQL saw more than #{POOL} connections of the app"
      assert_operator backends.max, :>=, 1, "no connection of the app was seen while the requests ran"
      assert_operator sleeping.max, :>=, 2, "the requests' pg_sleep(0.05) never ran on two connections at once"
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

  # @return [String] the server log's lines that are not backtrace lines, the last 20
  def server_errors(log)
    File.readlines(log).grep_v(/\A\s*(from )?\/|\A\s*\z/).last(20).join
  end

  # @return [String] the Rails version the app runs on
  def rails_version(port)
    Net::HTTP.start("127.0.0.1", port, open_timeout: 10, read_timeout: 30) { |http| http.get("/version").body }
  end

  # @return [Array(String, String)] the response's status code and body
  def create_post(port, author, title)
    response = Net::HTTP.start("127.0.0.1", port, open_timeout: 10, read_timeout: READ_TIMEOUT) do |http|
      http.post("/authors/#{author}/posts", URI.encode_www_form(title: title),
                "content-type" => "application/x-www-form-urlencoded")
    end
    [response.code, response.body]
  end

  def environment(pool: POOL)
    { "RAILS_ENV" => "production", "DB_POOL" => pool.to_s, "DB_CHECKOUT_TIMEOUT" => CHECKOUT_TIMEOUT.to_s,
      "SEED_AUTHORS" => SPARE_AUTHOR.to_s,
      "DATABASE_URL" => postgres.url(DATABASE).sub("postgres://", "weft-postgresql://") }
  end

  # Runs Rails' tasks (the app's Rakefile) in a process of their own, with `pool:` PostgreSQL
  # connections.
  def rails(*tasks, pool: POOL)
    output, status = Open3.capture2e(environment(pool: pool), RbConfig.ruby, Gem.bin_path("rake", "rake"), *tasks, chdir: APP)
    assert status.success?, "rake #{tasks.join(' ')} failed:\n#{output}"
  end

  # Runs `weft serve -w 0` on the app and yields its port and the path of its log.
  def serve(&block)
    serve_rackup(File.join(APP, "config.ru"), env: environment, wait: BOOT_WAIT, &block)
  end

  # The client backends connected to the app's database (autovacuum's workers visit it too),
  # counted every 10 ms from the `postgres` database while the block runs.
  # @return [Array<Integer>] the counts seen
  def watch_backends(&block)
    postgres.count_backends_while("datname = $1 and backend_type = 'client backend'", [DATABASE], &block)
  end

  # The app's connections running a request's pg_sleep, counted every 10 ms while the block runs.
  # @return [Array<Integer>] the counts seen
  def watch_sleeps(&block)
    postgres.count_backends_while("datname = $1 and state = 'active' and query like $2", [DATABASE, SLEEP_QUERY], &block)
  end
end
