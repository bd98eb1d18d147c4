# frozen_string_literal: true

# A test suite of a Rails-style app on `adapter: weft_postgresql` with transactional tests and
# fixtures, run in its own process by test/postgres/active_record_adapter_test.rb (DATABASE_URL
# names the database as weft-postgresql://...). Every test adds a row to the two fixtures; each
# must see only its own, so the suite passes only if every test's transaction was rolled back.
require "minitest/autorun"
require "active_support"
require "active_support/test_case"
require "active_record"
require "active_record/fixtures"
require "active_record/connection_adapters/weft_postgresql_adapter"

ActiveRecord::Base.establish_connection
ActiveRecord::Base.connection_pool.with_connection do |conn|
  conn.create_table(:weft_notes, force: true) { |t| t.string :body }
end

# The fixture table's model.
class WeftNote < ActiveRecord::Base
end

# Transactional tests on the weft_postgresql adapter.
class TransactionalFixturesSuite < ActiveSupport::TestCase
  include ActiveRecord::TestFixtures

  self.fixture_paths = [File.join(__dir__, "fixtures")]
  self.use_transactional_tests = true
  fixtures :weft_notes

  4.times do |i|
    define_method(:"test_sees_fixtures_and_only_its_own_row_#{i}") do
      assert_equal "weft_postgresql", WeftNote.connection_db_config.adapter
      assert_equal %w[one two], WeftNote.order(:body).pluck(:body)
      WeftNote.create!(body: "row of test #{i}")
      assert_equal 3, WeftNote.count
      assert_equal "one", weft_notes(:first).body
    end
  end
end
