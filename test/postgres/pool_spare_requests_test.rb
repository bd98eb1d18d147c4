# frozen_string_literal: true

require_relative "../test_helper"
require "weft/postgres"

# The answered Requests a pool keeps for reuse (Pool#pipelined) are bounded by what it can have
# in flight, limit x pipeline_depth: a caller makes its Request before it waits for room, so a
# burst of callers made one each, and the pool kept them all for good (20,000 callers at once:
# 19,990 Requests, 4 MB, on a pool of 10 connections).
class PostgresPoolSpareRequestsTest < Minitest::Test
  include Weft::Test::PostgresPools

  def test_a_burst_of_callers_leaves_no_more_spare_requests_than_can_be_in_flight
    db = pool(limit: 2, pipeline_depth: 4)
    callers = 200
    reactor do
      answers = Weft.gather(Array.new(callers) { |i| Weft.spawn { db.query("select $1::int", i).getvalue(0, 0) } })
      assert_equal (0...callers).map(&:to_s), answers
      pipelined = db.statistics[:pipelined]
      assert_operator pipelined, :>, 2 * 4, "too few statements were pipelined to tell: #{db.statistics}"
      spare = db.instance_variable_get(:@spare_requests)
      assert_operator spare.size, :<=, 2 * 4, "#{spare.size} spare requests kept after #{pipelined} pipelined statements"
      refute_empty spare, "none kept for reuse"
    end
  end
end
