# frozen_string_literal: true

require_relative "test_helper"

# A shard that lost its pools with its lock session keeps their states, and takes a pool back
# with its state only if no other shard may have served it since (Allocator#readopt, #forget).
class RingpoolAllocatorTest < Minitest::Test
  def setup
    @allocator = Ringpool::Allocator.new(nil) # nothing here reads or writes the table
    @pool = Ringpool::RingPool.new(id: 7, overflow_number: "+15550000000", lockout_seconds: 60)
    @allocator.adopt(@pool, [["+15550000001", 0], ["+15550000002", 0]])
  end

  def test_a_retained_state_is_taken_back_with_its_lockouts
    picked = @allocator.state(7).pick.number
    @allocator.release(7, retain: true)
    refute @allocator.owns?(7)
    assert @allocator.retained?(7)
    assert @allocator.readopt(@pool)
    assert @allocator.owns?(7)
    refute @allocator.retained?(7), "taken back once"
    assert_equal (%w[+15550000001 +15550000002] - [picked]), [@allocator.state(7).pick.number], "the pick before the loss still holds"
    assert_nil @allocator.state(7).pick
  end

  def test_a_pool_given_away_is_not_retained
    @allocator.release(7)
    refute @allocator.retained?(7)
    refute @allocator.readopt(@pool)
  end

  def test_a_pool_another_shard_holds_is_forgotten
    @allocator.release(7, retain: true)
    @allocator.forget { |id| id == 8 }
    assert @allocator.retained?(7), "another pool's owner says nothing about this one"
    @allocator.forget { |id| id == 7 }
    refute @allocator.readopt(@pool)
  end

  def test_a_changed_pool_or_an_old_state_is_loaded_anew
    @allocator.release(7, retain: true)
    refute @allocator.readopt(Ringpool::RingPool.new(id: 7, overflow_number: "+15550000000", lockout_seconds: 30))

    @allocator.adopt(@pool, [["+15550000001", 0]])
    @allocator.release(7, retain: true)
    now = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    Process.stub(:clock_gettime, now + Ringpool::Allocator::RETAIN_SECONDS + 1) do
      refute @allocator.readopt(@pool), "kept past RETAIN_SECONDS"
    end

    @allocator.adopt(@pool, [["+15550000001", 0]])
    @allocator.release(7, retain: true)
    Process.stub(:clock_gettime, now + Ringpool::Allocator::RETAIN_SECONDS + 1) { @allocator.forget { false } }
    refute @allocator.retained?(7), "forgotten once its time is up"
  end
end
