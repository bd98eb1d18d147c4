# frozen_string_literal: true

require_relative "../test_helper"
require_relative "support/server_helpers"
require_relative "support/process_helpers"
require "json"
require "weft/server/fork_heap"

# The heap a worker inherits: collected, and grown to worker_heap_free free, so that a worker
# whose live objects grow after the fork does not run major GCs by :nofree (ForkHeap).
class ServerForkHeapTest < Minitest::Test
  include Weft::Test::ServerHelpers
  include Weft::Test::ProcessHelpers

  def watchdog_timeout
    120
  end

  def test_settle_leaves_each_size_pool_the_fraction_free_asked_for_and_a_later_gc_keeps_it
    kept = Array.new(100_000) { Object.new } # more live objects than the test process's heap has room for
    settled = Weft::Server::ForkHeap.settle(free: 0.5)
    assert_operator settled[:grown], :>, 0
    assert_equal :force, GC.latest_gc_info[:major_by]
    assert_equal :none, GC.latest_gc_info[:state], "left half swept"
    GC.start
    Weft::Server::ForkHeap.pools.each do |pool|
      next if pool.missing(0.5) < Weft::Server::ForkHeap::MIN_GROWTH
      flunk("#{pool.inspect}: less than half free after settle(free: 0.5) and a GC")
    end
    again = Weft::Server::ForkHeap.settle(free: 0.5)
    assert_equal 0, again[:grown], "grown again although nothing was allocated since"
    assert_equal 0, Weft::Server::ForkHeap.settle(free: 0)[:grown]
    kept.clear
  end

  # The master (--preload) holds 150,000+ objects in a heap its full GC left 20-30% free. A
  # worker killed and replaced, whose live objects then grow by 15% between minor GCs, runs no
  # major GC with the default worker_heap_free; with 0 (the heap as the master's GC left it),
  # the same load makes it run one, by :nofree.
  def test_a_replacement_worker_grows_without_a_major_gc_in_the_room_the_master_left
    room = replacement_worker_under_growth
    assert_operator room[:inherited_free], :>=, 0.39, room.inspect
    assert_equal 0, room[:majors], "major GCs in the replacement worker: #{room.inspect}"

    tight = replacement_worker_under_growth("--worker-heap-free", "0")
    assert_operator tight[:inherited_free], :<=, 0.3, tight.inspect
    assert_operator tight[:majors], :>=, 1, "the control run did not need the room: #{tight.inspect}"
    assert_equal "nofree", tight[:major_by], tight.inspect
  end

  # Without preload the worker loads the app, and builds that heap, itself: it settles its own
  # heap before it serves.
  def test_a_worker_that_loads_the_app_itself_settles_its_heap_before_serving
    room = replacement_worker_under_growth(preload: false)
    assert_operator room[:inherited_free], :>=, 0.39, room.inspect
    assert_equal 0, room[:majors], "major GCs in the replacement worker: #{room.inspect}"

    tight = replacement_worker_under_growth("--worker-heap-free", "0", preload: false)
    assert_operator tight[:inherited_free], :<=, 0.3, tight.inspect
    assert_operator tight[:majors], :>=, 1, "the control run did not need the room: #{tight.inspect}"
  end

  private

  # Starts one worker (preloaded: the master loads heap.ru), kills it, and grows its
  # replacement's live objects by 15% of those it started with, in ten steps, each followed by a
  # churn of short-lived objects.
  # @return [Hash] :inherited_free (fraction of slots free as the replacement began serving),
  #   :majors (its major GCs since), :major_by (the last major GC's cause)
  def replacement_worker_under_growth(*args, preload: true)
    port = free_tcp_port
    args << "--preload" if preload
    with_weft(File.join(FIXTURES, "heap.ru"), "-p", port.to_s, "-o", "127.0.0.1", "-w", "1", *args,
              port: port, log: ENV["HEAP_TEST_LOG"] || File::NULL) do
      first = Integer(get_body(port))
      Process.kill("KILL", first)
      eventually(20, "a replacement worker") { (pid = get_body(port).to_i) != first && pid }
      start = JSON.parse(get_body(port, "/gc"), symbolize_names: true)
      step = (start[:heap][:live] * 0.015).ceil
      10.times do
        get_body(port, "/grow?n=#{step}")
        get_body(port, "/churn")
      end
      3.times { get_body(port, "/churn") }
      gc = JSON.parse(get_body(port, "/gc"), symbolize_names: true)
      { inherited_free: 1 - start[:heap][:live].fdiv(start[:heap][:slots]), majors: gc[:majors], major_by: gc[:major_by],
        start: start[:heap], now: gc[:now] }
    end
  end
end
