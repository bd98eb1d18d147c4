# frozen_string_literal: true

require_relative "boot"
require "rails"
require "active_record/railtie"
require "action_controller/railtie"
# Registers `adapter: weft_postgresql` (DATABASE_URL=weft-postgresql://...); an app on
# `adapter: postgresql` is unaffected by it.
require "active_record/connection_adapters/weft_postgresql_adapter"

module RailsApp
  # A small API app for the Rails proof of issue #12 (test/postgres/rails_app_test.rb,
  # bench/postgres/rails_bench.rb), on Rails 7.2 (Ruby 3.1), 8.1 (Ruby 3.3) and 7.1 (gemfiles/rails71.gemfile). The same code
  # runs under `weft serve`, Puma and Falcon; only the environment differs:
  #
  # - DATABASE_URL: weft-postgresql://... (Weft) or postgres://... (Puma, Falcon)
  # - DB_POOL: database.yml's `pool:` (default 5)
  # - DB_CHECKOUT_TIMEOUT: database.yml's `checkout_timeout:` (default 5)
  # - RAILS_ISOLATION_LEVEL: fiber (default; Weft and Falcon run each request in a fiber) or
  #   thread (Puma)
  # - RAILS_LOG_LEVEL: default warn, so that a benchmark measures the app and not its log; errors
  #   (a ConnectionTimeoutError among them) are still written to standard output.
  class Application < Rails::Application
    # The Rails in use's own defaults (7.1, 7.2 or 8.1), as `rails new` would set.
    config.load_defaults Rails::VERSION::STRING.to_f
    config.api_only = true
    config.eager_load = Rails.env.production?
    config.secret_key_base = ENV.fetch("SECRET_KEY_BASE", "weft-rails-app-fixture-not-a-secret")
    config.active_support.isolation_level = ENV.fetch("RAILS_ISOLATION_LEVEL", "fiber").to_sym
    config.active_record.dump_schema_after_migration = false # keep the fixture's folder unchanged
    config.logger = ActiveSupport::Logger.new($stdout)
    config.log_level = ENV.fetch("RAILS_LOG_LEVEL", "warn").to_sym
  end
end
