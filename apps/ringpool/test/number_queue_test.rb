# frozen_string_literal: true

require_relative "test_helper"

# The allocation rule, in memory: free when the lockout has ended, the one free the longest first.
class RingpoolNumberQueueTest < Minitest::Test
  LOCKOUT = 10_000_000 # 10 s in microseconds

  def state(numbers, lockout_seconds: 10)
    pool = Ringpool::RingPool.new(id: 1, overflow_number: "+15550000000", lockout_seconds: lockout_seconds)
    Ringpool::PoolState.new(pool, numbers)
  end

  def test_two_numbers_then_exhausted
    pool = state([["+15550000001", 0], ["+15550000002", 0]])
    now = 1_000_000_000
    assert_equal %w[+15550000001 +15550000002], [pool.pick(now).number, pool.pick(now + 1).number]
    assert_nil pool.pick(now + 2)
    assert_equal "+15550000001", pool.pick(now + LOCKOUT).number, "free again when its lockout ended"
  end

  def test_rotates_fairly_taking_the_number_free_the_longest
    pool = state([["+15550000003", 30], ["+15550000001", 10], ["+15550000002", 20]])
    picks = Array.new(9) { |i| pool.pick(1_000 + i * LOCKOUT).number }
    assert_equal %w[+15550000001 +15550000002 +15550000003] * 3, picks
  end

  def test_lockout_ends_read_from_the_table_are_respected
    now = 5_000_000_000
    pool = state([["+15550000001", now + 5], ["+15550000002", now - 5], ["+15550000003", now - 50]])
    assert_equal "+15550000003", pool.pick(now).number
    assert_equal "+15550000002", pool.pick(now).number
    assert_nil pool.pick(now), "+15550000001 is locked out for 5 more microseconds"
    assert_equal "+15550000001", pool.pick(now + 5).number
  end

  def test_undo_restores_the_number_and_its_place
    pool = state([["+15550000001", 0], ["+15550000002", 0], ["+15550000003", 0]])
    first = pool.pick(100)
    second = pool.pick(101)
    pool.undo(first)
    pool.undo(second)
    assert_equal %w[+15550000001 +15550000002 +15550000003], pool.queue.map(&:number)
    assert_equal [0, 0, 0], pool.queue.map(&:free_at)
    assert_equal 3, pool.free_count(102)
  end

  def test_a_clock_stepping_back_never_shortens_the_order
    pool = state([["+15550000001", 0], ["+15550000002", 0]])
    a = pool.pick(2_000_000)
    b = pool.pick(1_000_000) # the wall clock went back a second
    assert_operator b.locked_until, :>=, a.locked_until
    assert_equal [a.number, b.number], pool.queue.map(&:number)
  end

  # O(1): taking from a 500-number pool costs the same as from a 2-number one (and 100,000
  # picks take well under a second).
  def test_pick_does_not_scan
    numbers = Array.new(500) { |i| [format("+1555%07d", i), 0] }
    pool = state(numbers, lockout_seconds: 1)
    # CPU time, not the wall clock: beside busy processes the picks took 2.2 s of wall time
    # (a scan of the 500 numbers on every pick costs far more CPU than 2 s)
    started = Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID)
    now = 1
    100_000.times do
      now += 2_001 # 500 numbers, 1 s lockout: one number frees up every 2 ms
      pool.pick(now) or flunk("exhausted at #{now}")
    end
    assert_operator Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID) - started, :<, 2
  end
end
