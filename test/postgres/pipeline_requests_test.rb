# frozen_string_literal: true

require_relative "../test_helper"
require "weft/postgres"

# The Requests that carry pipelined statements: a pool reuses those answered (Pool#pipelined),
# whichever fiber sent them. (That one whose caller left while it was in flight is not reused:
# deadline_test.rb's test_a_fiber_goes_on_pipelining_while_its_abandoned_statement_is_still_in_flight.)
class PostgresPipelineRequestsTest < Minitest::Test
  include Weft::Test::PostgresPools

  # Counts Request.new while installed.
  module CountNew
    class << self
      attr_accessor :count
    end
    self.count = 0

    def new(...)
      CountNew.count += 1
      super
    end
  end
  Weft::Postgres::Request.singleton_class.prepend(CountNew)

  # Short-lived fibers, 20 at a time, five rounds: each round's fibers are new, and their
  # statements are pipelined over 2 connections. The pool needs a request per statement in
  # flight at once (at most 20), not one per fiber (100).
  def test_requests_are_reused_across_fibers
    db = pool(limit: 2)
    reactor do
      db.query("select 1") # opens a connection; statements are pipelined once both are in use
      CountNew.count = 0
      values = Array.new(5) do |round|
        Weft.gather(Array.new(20) { |i| Weft.spawn { db.query("select $1::int", (round * 20) + i).getvalue(0, 0) } })
      end
      assert_equal (0...100).map(&:to_s), values.flatten
      pipelined = db.statistics[:pipelined]
      assert_operator pipelined, :>=, 40, "too few statements were pipelined to tell: #{db.statistics}"
      assert_operator CountNew.count, :<=, 20, "#{CountNew.count} requests made for #{pipelined} pipelined statements"
    end
  end

  # The requests a pool keeps for reuse outlive the reactor their statements ran on: they must
  # not keep it (and the idle fibers it pools) from the garbage collector.
  def test_requests_kept_for_reuse_keep_no_finished_reactor
    db = pool(limit: 2)
    reactor do
      Weft.gather(Array.new(20) { |i| Weft.spawn { db.query("select $1::int", i) } })
    end
    spare = db.instance_variable_get(:@spare_requests)
    refute_empty spare, "no request was kept for reuse: #{db.statistics}"
    kept = spare.count { |request| request.condition.instance_variable_get(:@scheduler) }
    assert_equal 0, kept, "#{kept} of #{spare.size} idle requests keep a reactor"
  end
end
