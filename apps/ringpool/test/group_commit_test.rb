# frozen_string_literal: true

require_relative "test_helper"

# Group commit, against a store that records its statements: requests of one reactor turn share
# an INSERT, requests arriving while it runs share the next one, and a failure reaches every
# request of its group and no other.
class RingpoolGroupCommitTest < Minitest::Test
  # Stands in for Store#record: each call is one INSERT; "stores" every row except those whose
  # pick is :refused, after `delay` seconds, or raises the next error queued in `failures`;
  # answers true when it stored every row, else the keys of those it stored, as Store#record.
  class RecordingStore
    attr_reader :statements, :failures

    def initialize(delay)
      @delay = delay
      @statements = []
      @failures = []
    end

    def record(rows)
      @statements << rows.map(&:first)
      sleep @delay
      raise @failures.shift unless @failures.empty?
      stored = rows.map(&:first).reject { |pick| pick == :refused }
      stored.size == rows.size || stored.map { |pick| [pick, 0] }
    end
  end

  def test_requests_of_one_turn_share_an_insert_and_later_ones_share_the_next
    store = RecordingStore.new(0.05)
    Weft.run do
      commit = Ringpool::GroupCommit.new(store, in_flight: 1, timeout: 1)
      first = [commit.submit([[:a, "{}"], [:refused, "{}"]]), commit.submit([[:b, "{}"]])]
      sleep 0.01 # the first INSERT is running now
      later = Array.new(3) { |i| Weft.spawn { commit.submit([[:"c#{i}", "{}"]]).wait } }
      assert_equal({ [:a, 0] => true, [:b, 0] => true }, first.first.wait)
      assert_equal first.first.wait, first.last.wait, "the two requests of one turn wait on one INSERT"
      assert_equal [true] * 3, Weft.gather(later), "every row stored: told by the count alone"
    end
    assert_equal [%i[a refused b], %i[c0 c1 c2]], store.statements
  end

  def test_a_failed_insert_fails_its_own_group_only
    store = RecordingStore.new(0.05)
    store.failures << PG::ConnectionBad.new("gone")
    Weft.run do
      commit = Ringpool::GroupCommit.new(store, in_flight: 1, timeout: 1)
      failing = commit.submit([[:a, "{}"]])
      sleep 0.01
      next_one = commit.submit([[:b, "{}"]])
      assert_raises(PG::ConnectionBad) { failing.wait }
      assert_equal true, next_one.wait
    end
  end

  def test_an_insert_past_its_timeout_is_a_timeout_for_its_waiters
    store = RecordingStore.new(0.5)
    Weft.run do
      commit = Ringpool::GroupCommit.new(store, in_flight: 1, timeout: 0.1)
      assert_raises(Timeout::Error) { commit.submit([[:a, "{}"]]).wait }
    end
  end

  # A request whose deadline passed while its picks waited for the INSERT before theirs has
  # answered already: its picks are not stored, and its promise says why.
  def test_picks_whose_deadline_passed_before_their_insert_are_left_out
    store = RecordingStore.new(0.1)
    Weft.run do
      commit = Ringpool::GroupCommit.new(store, in_flight: 1, timeout: 1)
      first = commit.submit([[:a, "{}"]])
      sleep 0.01 # the first INSERT is running now
      late = Weft.deadline(0.03) { commit.submit([[:late, "{}"]]) }
      on_time = commit.submit([[:b, "{}"]])
      assert_equal true, first.wait
      assert_equal true, on_time.wait
      assert_raises(Weft::DeadlineExceeded) { late.wait }
    end
    assert_equal [[:a], [:b]], store.statements
  end

  # Shard#allocate rescues the DeadlineExceeded of a lookup that ran out of time and goes on:
  # Weft raises it once, so no timer is left to end a wait after it. Picks submitted then are
  # refused at once, not held until the INSERT in flight ends.
  def test_picks_submitted_after_their_deadline_passed_are_refused_at_once
    store = RecordingStore.new(0.3)
    Weft.run do
      commit = Ringpool::GroupCommit.new(store, in_flight: 1, timeout: 1)
      first = commit.submit([[:a, "{}"]])
      sleep 0.01 # the first INSERT is running now
      Weft.deadline(0.02) do
        begin
          sleep 0.05
        rescue Weft::DeadlineExceeded
          nil
        end
        started = Weft::Timers.now
        assert_raises(Weft::DeadlineExceeded) { commit.submit([[:late, "{}"]]).wait }
        assert_operator Weft::Timers.now - started, :<, 0.05, "the late picks waited for the INSERT in flight"
      end
      assert_equal true, first.wait
    end
    assert_equal [[:a]], store.statements
  end

  def test_with_two_in_flight_a_second_insert_starts_while_the_first_runs
    store = RecordingStore.new(0.1)
    Weft.run do
      commit = Ringpool::GroupCommit.new(store, in_flight: 2, timeout: 1)
      first = commit.submit([[:a, "{}"]])
      sleep 0.02
      second = commit.submit([[:b, "{}"]])
      started = Weft::Timers.now
      [first, second].each(&:wait)
      assert_operator Weft::Timers.now - started, :<, 0.19, "the second INSERT waited for the first"
    end
    assert_equal [[:a], [:b]], store.statements
  end
end
