# frozen_string_literal: true

begin
  require "pg"
rescue LoadError => e
  raise LoadError, "Weft::Postgres needs the pg gem (1.5 or later): add `gem \"pg\", \"~> 1.5\"` to your Gemfile " \
                   "(#{e.message})"
end
require_relative "../weft"
require_relative "postgres/errors"
require_relative "postgres/settings"
require_relative "postgres/connection"
require_relative "postgres/request"
require_relative "postgres/background"
require_relative "postgres/pipeline"
require_relative "postgres/lease"
require_relative "postgres/statement_scope"
require_relative "postgres/pool"

module Weft
  # PostgreSQL for fibers: a connection pool (Weft::Postgres::Pool) whose #query pipelines
  # the statements of many fibers over few connections. Built on `pg`, whose blocking calls
  # yield to Weft's scheduler.
  #
  # See docs/postgres.md.
  module Postgres
    # libpq 14 brought pipeline mode.
    PIPELINE_LIBPQ = 140_000

    # @return [Boolean] whether the libpq `pg` was built against supports pipeline mode
    def self.pipelining_supported?
      PG.library_version >= PIPELINE_LIBPQ && PG::Connection.method_defined?(:enter_pipeline_mode)
    end
  end
end
