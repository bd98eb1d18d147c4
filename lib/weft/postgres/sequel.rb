# frozen_string_literal: true

require "sequel"

# Sequel keys its connection pool by Sequel.current, the current thread by default; this
# extension makes it the current fiber, so each request fiber on Weft gets its own connection
# and their statements overlap (the postgres adapter's `pg` calls yield to Weft's scheduler).
Sequel.extension :fiber_concurrency

module Weft
  module Postgres
    # Sequel on Weft, in one line:
    #
    #   require "weft/postgres/sequel"
    #   DB = Weft::Postgres::Sequel.connect # DATABASE_URL, or a URL/options as Sequel.connect takes
    #
    # Loading this file turns on Sequel's fiber_concurrency extension (a plain `Sequel.connect`
    # then works too); #connect also picks a pool suited to many fibers.
    module Sequel
      # The pool size used when the options name none.
      def self.default_max_connections
        Integer(ENV.fetch("WEFT_DB_POOL", 25))
      end

      # Sequel.connect with defaults for fiber concurrency: `max_connections` (WEFT_DB_POOL or
      # 25) and, on Ruby 3.2 and later, the timed_queue pool (it needs Queue#pop's timeout).
      # @param url [String, Hash, nil] as for Sequel.connect; nil means DATABASE_URL
      # @return [Sequel::Database]
      def self.connect(url = nil, **options)
        url ||= ENV.fetch("DATABASE_URL") { raise ArgumentError, "no URL given and DATABASE_URL is not set" }
        defaults = { max_connections: default_max_connections }
        defaults[:pool_class] = :timed_queue if RUBY_VERSION >= "3.2"
        ::Sequel.connect(url, **defaults, **options)
      end
    end
  end
end
