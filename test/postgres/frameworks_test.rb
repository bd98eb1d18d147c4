# frozen_string_literal: true

require_relative "../test_helper"
require "net/http"

# ActiveRecord (adapter: postgresql and weft_postgresql) and Sequel apps served by Weft's server
# (`weft serve`, a real process, on the test's own bundle) with DATABASE_URL: ten requests that
# each sleep 0.5 s in PostgreSQL overlap. ActiveRecord 7.2 on Ruby 3.1, 8.1 on 3.3; bin/test runs
# the ActiveRecord tests again under Rails 7.1 (gemfiles/rails71.gemfile) on Ruby 3.1.
class PostgresFrameworksTest < Minitest::Test
  include Weft::Test::WeftServe
  ROOT = File.expand_path("../..", __dir__)
  APPS = File.join(__dir__, "apps")

  def test_active_record_requests_overlap_under_weft
    serve(File.join(APPS, "active_record.ru")) do |port|
      assert_equal "probe p 1", get(port, "/probe")
      assert_equal Gem.loaded_specs.fetch("activerecord").version.to_s, get(port, "/version"), "not this bundle's ActiveRecord"
      assert_overlapping_sleeps(port)
    end
  end

  # The weft_postgresql adapter (DATABASE_URL=weft-postgresql://...): ten requests that each
  # sleep 0.5 s in PostgreSQL overlap on the pool's connections, and two hundred requests at
  # once find an ActiveRecord connection each while PostgreSQL sees at most `pool` of them.
  def test_weft_postgresql_adapter_requests_share_few_connections_under_weft
    url = "#{postgres.url.sub('postgres://', 'weft-postgresql://')}?pool=10"
    serve(File.join(APPS, "weft_postgresql.ru"), database_url: url) do |port|
      assert_equal "adapter PostgreSQL weft_postgresql #{Gem.loaded_specs.fetch('activerecord').version}", get(port, "/")
      assert_equal "probe w 1", get(port, "/probe")
      assert_overlapping_sleeps(port)
      counts = Array.new(200) { Thread.new { get(port, "/backends") } }.map { |thread| Integer(thread.value) }
      assert_operator counts.max, :<=, 10
    end
  end

  # A migration at boot on a pool of one PostgreSQL connection: the migrator's advisory lock
  # held that connection for the adapter that migrated, which ActiveRecord keeps leased to the
  # booting thread, so every request waited checkout_timeout and failed; unlocked, it is shared.
  def test_weft_postgresql_adapter_migrates_at_boot_on_one_connection
    database = "weft_boot_migration"
    postgres.psql("DROP DATABASE IF EXISTS #{database}")
    postgres.create_database(database)
    url = "#{postgres.url(database).sub('postgres://', 'weft-postgresql://')}?pool=1&checkout_timeout=3"
    Dir.mktmpdir do |migrations|
      File.write(File.join(migrations, "20240101000000_create_weft_boot_widgets.rb"), <<~RUBY)
        class CreateWeftBootWidgets < ActiveRecord::Migration[7.1]
          def change
            create_table(:weft_boot_widgets) { |t| t.string :name }
          end
        end
      RUBY
      serve(File.join(APPS, "weft_postgresql.ru"), database_url: url, env: { "MIGRATE" => migrations }) do |port|
        assert_equal "widgets 0", get(port, "/widgets")
        assert_equal "probe w 1", get(port, "/probe")
      end
    end
  end

  def test_sequel_requests_overlap_under_weft
    serve(File.join(APPS, "sequel.ru")) do |port|
      assert_equal "probe s", get(port, "/probe")
      assert_overlapping_sleeps(port)
    end
  end

  private

  def assert_overlapping_sleeps(port)
    bodies = assert_elapsed_under(2.0, "10 x pg_sleep(0.5) did not overlap") do
      Array.new(10) { Thread.new { get(port, "/sleep") } }.map(&:value)
    end
    assert_equal Array.new(10) { "slept " }, bodies
  end

  def get(port, path)
    response = Net::HTTP.start("127.0.0.1", port, open_timeout: 5, read_timeout: 10) { |http| http.get(path) }
    assert_equal "200", response.code, response.body
    response.body
  end

  # Runs `weft serve` on the rackup file in a single process, with `env` added to its
  # environment, and yields its port.
  def serve(rackup, database_url: postgres.url, env: {})
    skip "Weft's server (exe/weft) is not available" unless File.exist?(File.join(ROOT, "lib/weft/server.rb"))
    env = env.merge("DATABASE_URL" => database_url, "RUBYLIB" => File.join(ROOT, "lib"))
    serve_rackup(rackup, env: env, args: ["-q"]) { |port, _log| yield port }
  end
end
