# frozen_string_literal: true

require "securerandom"

module Ringpool
  module Test
    # Fresh databases and pools for the app's tests.
    module Helpers
      # A new, empty database on the shared throwaway cluster, migrated. @return [String] its URL
      def fresh_database
        url = postgres.create_database("ringpool_#{SecureRandom.hex(6)}")
        with_db(url) { |db| Ringpool::Schema.migrate(db) }
        url
      end

      # Runs the block in a reactor with a pool on `url`, closed afterwards.
      def with_db(url, size: 4)
        db = Weft::Postgres::Pool.new(url, size: size)
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
    end
  end
end
