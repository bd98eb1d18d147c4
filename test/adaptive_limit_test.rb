# frozen_string_literal: true

require_relative "test_helper"
require "weft/pool"

# Weft::Pool::AdaptiveLimit against modelled services, round by round (deterministic; the
# HTTP client's tests run it against real upstreams).
class AdaptiveLimitTest < Minitest::Test
  SERVICE = 0.01

  def setup
    @limit = Weft::Pool::AdaptiveLimit.new(floor: 2, ceiling: 64)
    @now = 0.0
    @random = Random.new(7) # latencies of a service's own, in no relation to the order of holds
  end

  # One round: as many holds as the limit lets run (of `demand`), begun now one after another
  # (the i-th finds i in flight), the i-th taking `latency.call(in_flight, i)` seconds and
  # discarded if `discarded.call(i)`; the clock moves on by the slowest.
  def round(demand: 64, discarded: ->(_) { false }, &latency)
    in_flight = [@limit.limit, demand].min
    took = Array.new(in_flight) { |i| latency.call(in_flight, i) }
    took.each_with_index { |seconds, i| @limit.sample(@now, @now + seconds, i + 1, discarded.call(i)) }
    @now += took.max
  end

  # Workers that serve `capacity` at once and queue the rest, first come first served: the
  # i-th of n waits for i / capacity services before its own. (At its start a burst finds the
  # queue empty, and the first answers come after one service.)
  def saturated(capacity)
    ->(_in_flight, i) { ((i / capacity) + 1) * SERVICE }
  end

  def test_a_saturated_service_gets_about_what_it_serves_at_once
    10.times { round(&saturated(2)) }
    assert_operator @limit.limit, :<=, 12, "the limit after 10 rounds against 2 workers"
    assert_operator @limit.limit, :>=, 2
    assert_in_delta SERVICE, @limit.baseline, SERVICE / 10
  end

  def test_a_service_with_room_keeps_the_whole_limit
    10.times { round { SERVICE * (1 + @random.rand(3)) } } # 10-30 ms whatever the in-flight count
    assert_equal 64, @limit.limit
  end

  # Latencies spread wider than TOLERANCE (10 ms to 200 ms, mean 105) but not growing with
  # the in-flight count: cuts are tried, they do not lower the latency, and the limit comes back.
  def test_a_spread_that_is_the_services_own_gets_the_limit_back
    lowest = 64
    20.times do
      round { SERVICE * (1 + @random.rand(20)) }
      lowest = [lowest, @limit.limit].min
    end
    assert_operator lowest, :<, 64, "no cut was tried"
    assert_equal 64, @limit.limit
  end

  # A service with room that became five times slower: the latency is its own, not a queue.
  def test_a_service_that_slowed_down_gets_the_limit_back
    5.times { round { SERVICE } }
    12.times { round { 5 * SERVICE } }
    assert_equal 64, @limit.limit
  end

  # Down at the floor no cut can be tried. A service that was saturated and then serves in
  # parallel, but ten times slower than its fastest answer, would stay there; every
  # FLOOR_ROUNDS rounds the limit is raised as an experiment instead, and the latency does not
  # follow it.
  def test_a_limit_at_the_floor_is_raised_as_an_experiment
    @limit = Weft::Pool::AdaptiveLimit.new(floor: 12, ceiling: 64)
    20.times { round(&saturated(2)) }
    assert_equal 12, @limit.limit
    rounds = 0
    rounds += 1 until @limit.limit == 64 || rounds > 200 || !round { 10 * SERVICE }
    assert_equal 64, @limit.limit, "after #{rounds} rounds of a latency that is the service's own"
    assert_operator rounds, :>, Weft::Pool::AdaptiveLimit::FLOOR_ROUNDS, "it left the floor before a probe"
  end

  # Rounds mostly discarded (callers giving up) only lower the limit: their latency is a
  # lower bound.
  def test_discarded_rounds_never_raise_the_limit
    3.times { round(&saturated(2)) }
    lowered = @limit.limit
    assert_operator lowered, :<, 64
    5.times { round(discarded: ->(_) { true }) { SERVICE } }
    assert_operator @limit.limit, :<=, lowered
  end

  # Holds at the baseline latency say the limit could be higher (TOLERANCE times those in
  # flight), but not while they do not reach it.
  # Callers giving up at their deadline on all but the first few answers of every round (a
  # service far behind): those few are enough to see the queue.
  def test_a_service_whose_callers_mostly_give_up_still_gets_its_limit_lowered
    5.times { round(discarded: ->(i) { i >= 4 }, &saturated(2)) }
    assert_operator @limit.limit, :<=, 16
  end

  def test_a_limit_nobody_reaches_is_not_raised
    3.times { round(&saturated(2)) }
    lowered = @limit.limit
    demand = lowered - 1 # the i-th finds i in flight: (demand + 1) / 2 on average
    assert_operator (demand + 1) / 2.0 * Weft::Pool::AdaptiveLimit::TOLERANCE, :>, lowered
    40.times { round(demand: demand) { SERVICE } }
    assert_equal lowered, @limit.limit
    5.times { round { SERVICE } }
    assert_operator @limit.limit, :>, lowered, "rounds that use the limit, at the baseline, raise it"
  end
end
