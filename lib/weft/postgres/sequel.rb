# frozen_string_literal: true

# Deprecated: the first entry point of Weft's Sequel support, kept for the code that requires
# it. New code uses the weft_postgres adapter, which needs no require of its own (see
# lib/sequel/adapters/weft_postgres.rb and docs/postgres.md):
#
#   DB = Sequel.connect(adapter: :weft_postgres, conn_str: ENV["DATABASE_URL"])
#
# What requiring this file did, it still does: it turns on Sequel's fiber_concurrency extension
# (each fiber gets its own connection from a stock Sequel pool, for a plain
# `Sequel.connect("postgres://...")`), and defines Weft::Postgres::Sequel.connect, which now
# returns a weft_postgres Database. Nothing in Weft refers to Weft::Postgres::Sequel, so the
# constant shadows ::Sequel only for code that loads this file and says `Sequel` inside
# `module Weft::Postgres`.
require "sequel"
require "sequel/adapters/weft_postgres"

Sequel.extension :fiber_concurrency

module Weft
  module Postgres
    # @deprecated Use `Sequel.connect(adapter: :weft_postgres, ...)`.
    module Sequel
      @warned = false

      # @deprecated Use `Sequel.connect(adapter: :weft_postgres, conn_str: url, **options)`,
      #   which this now calls (warning once, where deprecation warnings are on).
      # @param url [String, nil] a postgres:// URL or libpq conninfo; nil means DATABASE_URL
      # @param options [Hash] Database options (see the weft_postgres adapter)
      # @return [::Sequel::WeftPostgres::Database]
      def self.connect(url = nil, **options)
        unless @warned
          @warned = true
          Kernel.warn("Weft::Postgres::Sequel.connect is deprecated: use Sequel.connect(adapter: :weft_postgres, " \
                      "conn_str: url)", uplevel: 1, category: :deprecated)
        end
        url ||= ENV.fetch("DATABASE_URL") { raise ArgumentError, "no URL given and DATABASE_URL is not set" }
        ::Sequel.connect(adapter: :weft_postgres, conn_str: url, **options)
      end
    end
  end
end
