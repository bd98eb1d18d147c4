# frozen_string_literal: true

require_relative "../test_helper"
require "weft/server"
require "weft/server/accept_spread"
require "minitest/mock"

# The rule by which a worker leaves new connections to a less loaded sibling, on a WorkerLoads
# table where the test plays the siblings (their processes: test/server/cluster_test.rb).
class ServerAcceptSpreadTest < Minitest::Test
  AcceptSpread = Weft::Server::AcceptSpread

  def setup
    @loads = Weft::Server::WorkerLoads.new(4)
    @mine = @loads.claim
    @sibling = @loads.claim
    @spread = AcceptSpread.new(@loads, @mine)
    @spread.start
    @loads.open(@sibling, Process.pid + 1)
  end

  def test_a_worker_leaves_connections_only_to_a_sibling_at_least_the_margin_below
    assert_nil @spread.lighter_sibling, "an idle worker must accept at once"
    @spread.opened(1)
    assert_nil @spread.lighter_sibling, "one above its sibling is not noticeably above"
    @spread.opened(AcceptSpread::MARGIN)
    assert_equal @sibling, @spread.lighter_sibling
    @loads.publish(@sibling, 1)
    assert_nil @spread.lighter_sibling
    @spread.closed(0)
    @loads.publish(@sibling, 40)
    assert_nil @spread.lighter_sibling, "the lighter one must not wait for a heavier sibling"
  end

  def test_above_a_few_connections_noticeably_means_a_proportion_more
    @spread.opened(100)
    @loads.publish(@sibling, 81)
    assert_nil @spread.lighter_sibling, "100 against 81 is within TOLERANCE"
    @loads.publish(@sibling, 80)
    assert_equal @sibling, @spread.lighter_sibling
  end

  def test_the_least_loaded_of_several_siblings_is_chosen_and_stopping_ones_are_left_out
    third = @loads.claim
    @loads.open(third, Process.pid + 2)
    @spread.opened(10)
    @loads.publish(@sibling, 5)
    @loads.publish(third, 3)
    assert_equal third, @spread.lighter_sibling
    @loads.close(third) # it stops accepting
    assert_equal @sibling, @spread.lighter_sibling
    @loads.release(third) # it exited
    @loads.close(@sibling)
    assert_nil @spread.lighter_sibling
  end

  def test_a_lone_worker_never_waits
    loads = Weft::Server::WorkerLoads.new(2)
    spread = AcceptSpread.new(loads, loads.claim)
    spread.start
    spread.opened(500)
    assert_nil spread.lighter_sibling
    refute spread.defer
    assert_equal 0, spread.deferred
  end

  def test_a_sibling_that_takes_nothing_while_waited_for_is_not_waited_for_again_until_it_accepts
    @spread.opened(5)
    started = Weft::Timers.now
    assert @spread.defer
    assert_operator Weft::Timers.now - started, :>=, AcceptSpread::DELAY
    assert_equal 1, @spread.deferred
    # It took nothing (its accepted count did not move): as if stopped.
    assert_nil @spread.lighter_sibling
    refute @spread.defer
    assert_equal 1, @spread.deferred
    # RETRY later: waited for again (it may be continued, and never first to accept).
    later = Weft::Timers.now + AcceptSpread::RETRY
    Weft::Timers.stub(:now, later) { assert_equal @sibling, @spread.lighter_sibling }
    @spread.defer
    assert_nil @spread.lighter_sibling
    # It accepts a connection of its own accord: waited for again at once.
    @loads.publish(@sibling, 1, accepted: true)
    assert_equal @sibling, @spread.lighter_sibling
    # Its slot taken by a new worker: waited for too.
    @spread.defer
    assert_nil @spread.lighter_sibling
    @loads.release(@sibling)
    assert_equal @sibling, @loads.claim
    @loads.open(@sibling, Process.pid + 3)
    assert_equal @sibling, @spread.lighter_sibling
  end

  def test_a_sibling_that_takes_the_connection_meanwhile_stays_trusted
    @spread.opened(5)
    taker = Thread.new do
      sleep(AcceptSpread::DELAY / 5)
      @loads.publish(@sibling, 1, accepted: true)
    end
    assert @spread.defer
    taker.join
    assert_equal @sibling, @spread.lighter_sibling
  end

  def test_the_wait_ends_as_soon_as_the_sibling_has_caught_up
    @spread.opened(5)
    catching_up = Thread.new do
      sleep(AcceptSpread::POLL)
      @loads.publish(@sibling, 5)
    end
    assert @spread.defer
    catching_up.join
    @loads.publish(@sibling, 0)
    assert_equal @sibling, @spread.lighter_sibling, "a sibling that caught up is not one that took nothing"
  end

  def test_slots_are_claimed_once_and_released_cleared
    loads = Weft::Server::WorkerLoads.new(2)
    first = loads.claim
    second = loads.claim
    assert_equal [0, 1], [first, second]
    assert_nil loads.claim, "only as many slots as the table has"
    loads.open(first, 123)
    loads.publish(first, 4, accepted: true)
    assert_equal [123, true, 4, 1], [loads.pid(first), loads.accepting?(first), loads.connections(first), loads.accepted(first)]
    loads.release(first)
    assert_equal [0, false, 0, 0], [loads.pid(first), loads.accepting?(first), loads.connections(first), loads.accepted(first)]
    assert_equal first, loads.claim
    assert_equal 2, loads.live
  end

  # After TTIN to many workers and TTOU back, a look at the siblings reads the slots claimed
  # now, not every slot up to the highest ever claimed (it read 40 here before: the slots 1 to
  # 40, for good). Freed slots are claimed again lowest first.
  def test_a_look_at_the_siblings_reads_only_the_slots_claimed_now
    loads = Weft::Server::WorkerLoads.new(64)
    slots = Array.new(64) { loads.claim }
    assert_equal (0...64).to_a, slots
    mine = slots[0]
    sibling = slots[40]
    (slots - [mine, sibling]).each do |slot|
      loads.open(slot, Process.pid + 10 + slot)
      loads.release(slot)
    end
    assert_equal 2, loads.live
    assert_equal [mine, sibling], Array.new(loads.live) { |index| loads.live_slot(index) }.sort
    spread = AcceptSpread.new(loads, mine)
    spread.start
    loads.open(sibling, Process.pid + 1)
    spread.opened(10)
    looked = []
    loads.define_singleton_method(:accepting?) do |slot|
      looked << slot
      super(slot)
    end
    assert_equal sibling, spread.lighter_sibling
    assert_equal [sibling], looked, "slots read for one look"
    assert_equal 1, loads.claim
    assert_equal [0, 1, 40], Array.new(loads.live) { |index| loads.live_slot(index) }.sort
  end

  # The master changes the list after the fork; a worker reads it in the shared memory.
  def test_the_slots_claimed_now_are_seen_by_forked_workers
    loads = Weft::Server::WorkerLoads.new(8)
    4.times { loads.claim }
    result, result_writer = IO.pipe
    go, go_writer = IO.pipe
    child = fork do
      go.read(1)
      result_writer.write(Array.new(loads.live) { |index| loads.live_slot(index) }.sort.join(","))
      exit!(0)
    end
    result_writer.close
    loads.release(0)
    loads.release(2)
    go_writer.write(".")
    Process.wait(child)
    assert_equal "1,3", result.read
  ensure
    [result, go, go_writer].each { |io| io&.close unless io&.closed? }
  end
end
