# frozen_string_literal: true

require_relative "test_helper"
require "weft/pool"

class PoolTest < Minitest::Test
  Resource = Struct.new(:id, :closed)

  def build(**options, &check)
    created = 0
    closed = []
    pool = Weft::Pool.new(close: ->(r) { r.closed = true; closed << r.id }, check: check, **options) do
      Resource.new(created += 1, false)
    end
    [pool, closed]
  end

  def test_reuses_the_most_recently_returned_resource
    pool, = build(limit: 3)
    a = pool.checkout
    b = pool.checkout
    pool.checkin(a)
    pool.checkin(b)
    assert_same b, pool.checkout
    assert_equal 2, pool.statistics[:created]
  end

  def test_with_checks_in_and_an_exception_discards
    pool, closed = build(limit: 1)
    first = pool.with { |r| r }
    assert_same first, pool.with { |r| r }
    assert_raises(RuntimeError) { pool.with { raise "broken" } }
    assert_equal [1], closed
    assert_equal 2, pool.with(&:id)
    stats = pool.statistics
    assert_equal 1, stats[:discarded]
    assert_equal 1, stats[:size]
  end

  def test_checkout_waits_for_a_free_resource_and_times_out
    pool, = build(limit: 1, acquire_timeout: 0.2)
    held = pool.checkout
    error = assert_elapsed_under(1) { assert_raises(Weft::Pool::TimeoutError) { pool.checkout } }
    assert_kind_of Weft::TimeoutError, error
    assert_equal 1, pool.statistics[:timeouts]
    Thread.new { sleep 0.1; pool.checkin(held) }
    assert_same held, pool.checkout(acquire_timeout: 2)
  end

  def test_limit_bounds_concurrent_holders_across_fibers
    pool, = build(limit: 3)
    peak = 0
    current = 0
    assert_elapsed_under(2) do
      Weft.run do
        Weft.map(1..12) do
          pool.with do
            current += 1
            peak = [peak, current].max
            sleep 0.1
            current -= 1
          end
        end
      end
    end
    assert_equal 3, peak
    assert_equal 3, pool.statistics[:created]
  end

  def test_a_cancelled_waiter_leaves_the_queue
    pool, = build(limit: 1)
    Weft.run do
      held = pool.checkout
      waiter = Weft.spawn { pool.checkout }
      sleep 0.05
      assert_equal 1, pool.statistics[:waiting]
      waiter.cancel
      assert_nil waiter.wait
      assert_equal 0, pool.statistics[:waiting]
      pool.checkin(held)
      assert_same held, pool.checkout(acquire_timeout: 0.1)
    end
  end

  def test_threads_and_fibers_share_one_pool
    pool, = build(limit: 2)
    results = Queue.new
    threads = 3.times.map { Thread.new { 5.times { pool.with { |r| sleep 0.01; results << r.id } } } }
    Weft.run { Weft.map(1..5) { pool.with { |r| sleep 0.01; results << r.id } } }
    threads.each(&:join)
    assert_equal 20, results.size
    assert_operator pool.statistics[:created], :<=, 2
  end

  def test_idle_timeout_and_max_age_retire
    pool, closed = build(limit: 2, idle_timeout: 0.05)
    a = pool.checkout
    pool.checkin(a)
    sleep 0.1
    b = pool.checkout
    refute_same a, b
    assert_equal [1], closed

    aged, = build(limit: 1, max_age: 0.05)
    first = aged.checkout
    aged.checkin(first)
    sleep 0.1
    refute_same first, aged.checkout
  end

  def test_max_uses_retires_on_checkin
    pool, closed = build(limit: 1, max_uses: 2)
    ids = 5.times.map { pool.with(&:id) }
    assert_equal [1, 1, 2, 2, 3], ids
    assert_equal [1, 2], closed
  end

  # Resources created together and used alike retire at points of their own in the last tenth
  # of max_uses, not all in the same round (LIMIT_SPREAD): 40 resources used once a round for
  # 100 rounds retire over several rounds, none before 90 uses or after 100.
  def test_max_uses_retirements_are_spread
    pool, = build(limit: 40, max_uses: 100)
    uses = Hash.new(0)
    retired_in_round = {}
    100.times do |round|
      held = Array.new(40) { pool.checkout }
      held.each do |resource|
        uses[resource.id] += 1
        pool.checkin(resource)
        retired_in_round[resource.id] = round if resource.closed
      end
    end
    assert_equal 40, retired_in_round.size, "every first-generation resource retired within 100 uses"
    assert_operator retired_in_round.values.uniq.size, :>=, 4, "retired over several rounds: #{retired_in_round.values.tally}"
    first_generation = uses.select { |id, _| id <= 40 }.values
    assert first_generation.all? { |count| count.between?(90, 100) }, "uses before retiring: #{first_generation.tally}"
  end

  def test_check_rejects_a_broken_idle_resource
    pool, closed = build(limit: 1) { |r| r.id != 1 }
    pool.with { nil }
    assert_equal 2, pool.with(&:id)
    assert_equal [1], closed
  end

  def test_a_failed_create_frees_its_slot
    attempts = 0
    pool = Weft::Pool.new(limit: 1, acquire_timeout: 0.5) do |fail_it|
      attempts += 1
      raise IOError, "refused" if fail_it
      :ok
    end
    assert_raises(IOError) { pool.checkout(true) }
    assert_equal :ok, pool.checkout(false)
    assert_equal 1, pool.statistics[:size]
  end

  # With max_creating, a burst of checkouts creates that many resources at a time; the rest wait
  # for whichever comes first, a creation ending or a resource coming back, and take a returned
  # resource rather than create one.
  def test_max_creating_bounds_creations_in_flight_and_waiters_take_returned_resources
    creating = 0
    peak = 0
    created = 0
    pool = Weft::Pool.new(limit: 10, max_creating: 2) do
      creating += 1
      peak = [peak, creating].max
      sleep 0.05 # a connect
      creating -= 1
      created += 1
    end
    assert_raises(ArgumentError) { Weft::Pool.new(limit: 1, max_creating: 0) { nil } }
    assert_elapsed_under(2) do
      Weft.run do
        # Each holder keeps its resource for a moment, much shorter than a creation.
        Weft.map(1..20) { pool.with { sleep 0.001 } }
      end
    end
    assert_equal 2, peak
    stats = pool.statistics
    assert_operator created, :<, 10, "waiters created resources instead of taking returned ones"
    assert_equal created, stats[:created]
    assert_equal 20, stats[:checkouts]
    assert_equal 0, stats[:waiting]
  end

  # A pool whose resources come back sooner than one can be made: repeated bursts share the
  # first wave instead of each opening another (before the growth rule, every burst beyond the
  # idle resources opened max_creating more, up to the limit).
  #
  # The figures are checked against the holds and creations as timed here, in the same run: on a
  # loaded machine a 1 ms sleep lasts 5-12 ms (the figures were once checked against 1 ms and
  # 50 ms with fixed margins, and failed there).
  def test_repeated_bursts_against_quickly_returned_resources_do_not_grow_the_pool
    creations = []
    holds = []
    clock = -> { Process.clock_gettime(Process::CLOCK_MONOTONIC) }
    pool = Weft::Pool.new(limit: 100, max_creating: 4) do
      started = clock.call
      sleep 0.05 # a connect: far longer than the holds below, even on a loaded machine
      creations << clock.call - started
      Object.new
    end
    sizes = []
    max_lag = nil
    peak_hold_time = 0.0
    assert_elapsed_under(5) do
      Weft.run do
        10.times do
          Weft.map(1..40) do
            pool.with do
              started = clock.call
              sleep 0.001
              holds << clock.call - started
              peak_hold_time = [peak_hold_time, pool.statistics[:hold_time] || 0].max
            end
          end
          sizes << pool.statistics[:created]
        end
        max_lag = Weft.scheduler.statistics[:max_lag]
      end
    end
    stats = pool.statistics
    assert_equal 400, stats[:checkouts]
    # The first burst opens a wave of 4 and grows on only while nothing comes back.
    counts = "#{sizes} created after each burst; holds #{holds.min.round(4)}-#{holds.max.round(4)} s " \
             "(hold_time up to #{peak_hold_time.round(4)} s), creations #{creations.min.round(4)}-" \
             "#{creations.max.round(4)} s, longest reactor turn #{max_lag.round(4)} s (#{stats})"
    # Past 8 resources at least 4 are busy (4 being created at most) and at most 39 others wait,
    # so the rule says "create" only while its median hold is longer than 2 x 4 / 41 of a
    # creation, and the figures go stale only when nothing comes back for a creation's time, a
    # hold at least as long (+1 ms: the pool times around the block). Where the kernel or a GC
    # pause stretched the 1 ms holds that far, creating was right by the figures the pool had:
    # skipped with the counts (after the checks below, which hold however long the holds).
    stretched = peak_hold_time * 41 > 2 * 4 * creations.min || holds.max + 0.001 >= creations.min
    grew_by_the_figures = stats[:created] > 8 && stretched
    unless grew_by_the_figures
      assert_operator stats[:created], :<=, 8,
                      "bursts opened resources that waiting would have spared: #{counts}"
    end
    # hold_time is a running median, which moves by a step of 6% per hold (down only after a
    # hold shorter than it): not below the shortest hold by more than a step, and not pulled up
    # past the 90th percentile by the few long holds while a burst starts, as a mean would be
    # (the pool times a hold from checkout to checkin, around what the block times: 1 ms more
    # allowed; 1.87 ms against a 90th percentile of 1.63 ms in a full Ruby 3.3 run);
    # create_time an average of creations.
    holds.sort!
    step = 1.0625
    assert_operator stats[:hold_time], :>=, holds.first / step, "hold_time below the shortest hold"
    assert_operator stats[:hold_time], :<=, holds[holds.size * 9 / 10] * step + 0.001, "hold_time above the holds' 90th percentile"
    assert_operator stats[:create_time], :>=, creations.min
    assert_operator stats[:create_time], :<=, creations.max

    # Without max_creating the rule is off: a checkout below the limit never waits, though the
    # figures (quick holds, slow creations) say "wait". Told by what the pool did, not by how the
    # burst's fibers were scheduled: its holders keep their resources until all 40 hold one, so
    # it needs 40 whatever came back meanwhile, and none of its checkouts may have waited. (It
    # was "a burst of 1 ms holds creates 40": on a loaded machine the reactor starts a burst over
    # several turns once a timer is due, early holders came back, and later ones took theirs:
    # 32 created.)
    eager = Weft::Pool.new(limit: 100) do
      sleep 0.05
      Object.new
    end
    eager_waited = 0
    Weft.run do
      3.times { Weft.map(1..4) { eager.with { sleep 0.001 } } } # the figures
      holding = 0
      give_up = Weft::Timers.now + 10
      Weft.map(1..40) do
        eager.with do
          holding += 1
          until holding == 40 || Weft::Timers.now > give_up
            eager_waited = [eager_waited, eager.statistics[:waiting]].max
            sleep 0.005
          end
        end
      end
    end
    eager_stats = eager.statistics
    assert_equal 0, eager_waited, "checkouts below the limit waited: #{eager_stats}"
    assert_equal 40, eager_stats[:created], eager_stats.inspect
    skip "holds stretched to a creation's scale (another process took the CPU): #{counts}" if grew_by_the_figures
  end

  # A pool with idle resources serves a burst no larger than their number from them alone.
  def test_a_burst_no_larger_than_the_idle_resources_creates_none
    pool = Weft::Pool.new(limit: 100, max_creating: 4) do
      sleep 0.02
      Object.new
    end
    Weft.run do
      Weft.map(1..12) { pool.with { sleep 0.05 } } # 12 resources, all idle afterwards
      created = pool.statistics[:created]
      5.times { Weft.map(1..12) { pool.with { sleep 0.001 } } }
      assert_equal created, pool.statistics[:created]
    end
  end

  # Holders that keep their resources while this process's CPU is busy with the others (a
  # client parsing its answers, its upstream answering at once): a returned resource lies idle
  # for a good share of its cycle, until the waiter woken for it gets the CPU. A new resource
  # would wait for the CPU the same way, so once the pool has seen that (the first burst), it
  # does not grow however long the line. Before, the holds, which stretch with every resource
  # added, said "grow": each burst of 200 opened more (37-42 resources after five).
  #
  # Counted in bursts, not in resources: where other processes take this one's core away in the
  # middle of holds (a loaded machine: 5 busy loops beside it), the running idle share can dip
  # below IDLE_SHARE_LIMIT for a moment and one burst opens a wave (seen in 5 runs of 6 with
  # holds of 0.2 ms round trip and 0.3 ms CPU, at load 7-12). Without the idle share the pool
  # grows in 3-4 of the 4 bursts after the first, quiet or loaded. The holds are mostly CPU (0.6
  # ms of it to a 0.1 ms round trip) so that the idle share stands well above the limit (0.3-0.5;
  # 0.15-0.33 with the holds above, on a quiet machine).
  def test_holders_waiting_for_this_processes_cpu_do_not_grow_the_pool
    pool = Weft::Pool.new(limit: 100, max_creating: 4) do
      sleep 0.01 # a connect
      Object.new
    end
    spin = lambda do |seconds| # CPU work in the holder: the reactor runs nothing else meanwhile
      finish = Process.clock_gettime(Process::CLOCK_MONOTONIC) + seconds
      nil while Process.clock_gettime(Process::CLOCK_MONOTONIC) < finish
    end
    burst = lambda do
      Weft.map(1..200) do
        pool.with do
          sleep 0.0001 # the answer's round trip: other fibers run meanwhile
          spin.call(0.0006) # reading it
        end
      end
    end
    sizes = stats = cpu_share = nil
    Weft.run do
      burst.call # the figures
      wall = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      cpu = Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID)
      sizes = [pool.statistics[:created]] + Array.new(4) { burst.call && pool.statistics[:created] }
      cpu_share = (Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID) - cpu) /
                  (Process.clock_gettime(Process::CLOCK_MONOTONIC) - wall)
      stats = pool.statistics
    end
    grew = sizes.each_cons(2).count { |before, after| after > before }
    counts = "#{sizes.inspect} resources after each burst, this process on the CPU #{(cpu_share * 100).round}% " \
             "of the bursts' time (#{stats.inspect})"
    idle_share_limit = Weft::Pool.const_get(:IDLE_SHARE_LIMIT)
    # The test's premise is that this process's CPU is the queue. Where other processes take
    # the core away (busy loops beside this one), holds stretch by whatever the kernel takes in
    # their middle, the idle share the pool sees falls toward its limit (0.094 beside 4 busy
    # loops at load ~10; 0.109 with this process on the CPU 27% of the time) and a burst may
    # open a wave: that is the machine's queue, not the pool's. Then, and only if the checks
    # fail, the test is skipped with the counts. The bursts are CPU work only: a process that
    # has its core runs them at a share near 1 (0.98-1.0 at load 4 on 2 cores, 0.27 beside 6
    # busy loops). Without the idle share the pool grows in every burst at a share of 1.
    if (grew > 1 || stats[:idle_share] <= idle_share_limit) && cpu_share < 0.75
      skip "this process lacked its CPU during the bursts (another process took it): #{counts}"
    end
    assert_operator grew, :<=, 1, "the pool grew for holders that waited for the CPU: #{counts}"
    assert_operator stats[:idle_share], :>, idle_share_limit, counts
  end

  # Below max_creating resources the pool creates without consulting the figures: resources
  # retired one by one (max_uses, discard) would otherwise leave it with one or two, which
  # the figures of quick holds never see as too few.
  def test_a_pool_shrunk_below_max_creating_refills_to_it
    pool = Weft::Pool.new(limit: 20, max_creating: 4) do
      sleep 0.02
      Object.new
    end
    Weft.run do
      5.times { Weft.map(1..8) { pool.with { sleep 0.001 } } }
      held = pool.statistics[:size].times.map { pool.checkout } # every one: the idle ones
      held.drop(1).each { |resource| pool.discard(resource) }
      pool.checkin(held.first)
      assert_equal 1, pool.statistics[:size]
      Weft.map(1..8) { pool.with { sleep 0.001 } }
    end
    # At least max_creating: past it the figures decide, and where the machine stretches the
    # 1 ms holds toward a creation's 20 ms they rightly say "create" (5 at load ~9; what they
    # say for quick holds is the repeated-bursts test's to check).
    assert_operator pool.statistics[:size], :>=, 4
  end

  # A pool whose holders keep their resources longer than a creation takes grows at once: a
  # burst beyond the idle resources creates for every waiter, in waves of max_creating, rather
  # than one creation at a time after a waiter has watched nothing come back for a creation's
  # time (the figures going stale), which a rule that never says "create" would still reach.
  #
  # Told by what the pool did, not by the clock: the burst's fibers all start in one turn of
  # the reactor, so the first wave's creations begin before any creation or hold can end,
  # however loaded the machine. (A bound on the burst's time, under two holds of 0.2 s, failed
  # at load 12, and passed that rule at 0.365 s on a quiet machine.) The holders keep their
  # resources until all of them hold one, so that no checkout can be served by a return.
  def test_a_pool_whose_resources_are_held_long_still_grows_at_once
    creating = peak_creating = 0
    pool = Weft::Pool.new(limit: 50, max_creating: 4) do
      creating += 1
      peak_creating = creating if creating > peak_creating
      sleep 0.01
      creating -= 1
      Object.new
    end
    holders = 20
    held = peak_held = 0
    Weft.run do
      Weft.map(1..5) { pool.with { sleep 0.2 } } # the figures: holds of 0.2 s, creations of 0.01 s
      peak_creating = 0 # those 5 were made before there were figures, at once
      give_up = Weft::Timers.now + 10
      Weft.map(1..holders) do
        pool.with do
          held += 1
          peak_held = held if held > peak_held
          sleep 0.005 until peak_held == holders || Weft::Timers.now > give_up
          held -= 1
        end
      end
    end
    assert_equal holders, peak_held, "not every holder got a resource while the others held theirs"
    assert_equal holders, pool.statistics[:created]
    assert_equal 4, peak_creating, "the burst did not create in waves of max_creating"
  end

  # Figures that say "wait" go stale when holders start keeping their resources: one waiter
  # watches, and when nothing comes back for a creation's time the pool creates.
  def test_a_waiter_creates_when_nothing_comes_back_for_a_creations_time
    pool = Weft::Pool.new(limit: 10, max_creating: 2) do
      sleep 0.02
      Object.new
    end
    Weft.run do
      20.times { Weft.map(1..2) { pool.with { sleep 0.001 } } } # quick holds, 20 ms creations
      held = 2.times.map { pool.checkout } # now kept for a long time
      fresh = assert_elapsed_under(0.5) { pool.checkout(acquire_timeout: 1) } # about two creations
      refute_includes held, fresh
      held.each { |resource| pool.checkin(resource) }
    end
    assert_equal 3, pool.statistics[:created]
  end

  # A checkout the figures keep waiting does not time out while the pool may grow: its
  # acquire_timeout up, it creates.
  def test_acquire_timeout_below_the_limit_creates_instead_of_raising
    pool = Weft::Pool.new(limit: 10, max_creating: 2, acquire_timeout: 0.05) do
      sleep 0.3 # creations take far longer than the quick holds below
      Object.new
    end
    Weft.run do
      3.times { Weft.map(1..2) { pool.with { sleep 0.001 } } }
      held = 2.times.map { pool.checkout }
      fresh = assert_elapsed_under(1) { pool.checkout }
      refute_includes held, fresh
    end
    stats = pool.statistics
    assert_equal 0, stats[:timeouts]
    assert_equal 3, stats[:created]
  end

  # The waiter watching for returns (the one whose wait is a creation's time) is served by a
  # return: another waiter takes the watch up. Before, the others waited for a return that did
  # not come (both resources now held for good) until their acquire_timeout (the HTTP client's
  # is its connect_timeout, 10 s), or for good without one, though the pool could grow.
  def test_the_watch_passes_on_when_the_watching_waiter_is_served
    pool = Weft::Pool.new(limit: 10, max_creating: 2) do
      sleep 0.2 # creations take far longer than the quick holds below
      Object.new
    end
    Weft.run do
      3.times { Weft.map(1..2) { pool.with { sleep 0.001 } } }
      first, second = 2.times.map { pool.checkout }
      watcher = Weft.spawn { pool.checkout(acquire_timeout: 3) } # waits a creation's time for a return
      other = Weft.spawn { pool.checkout(acquire_timeout: 3) }   # waits behind it
      sleep 0.02
      assert_equal 2, pool.statistics[:waiting]
      pool.checkin(first) # goes to the watcher
      assert_equal first, watcher.wait
      fresh = assert_elapsed_under(1.5) { other.wait } # a watch and a creation: 0.4 s
      refute_includes [first, second], fresh
    end
    assert_equal 3, pool.statistics[:created]
  end

  # A creation that ends while waiters wait wakes one even when resources came back meanwhile:
  # the waiters that took those are served, the one left must see that the pool may grow again.
  def test_a_creation_that_ends_wakes_a_waiter_even_after_returns
    pool = Weft::Pool.new(limit: 10, max_creating: 1) do
      sleep 0.2
      Object.new
    end
    Weft.run do
      3.times { pool.with { sleep 0.001 } }
      held = pool.checkout
      creator = Weft.spawn { pool.checkout } # watches 0.2 s, nothing comes back: creates (0.2 s)
      sleep 0.3
      waiters = 2.times.map { Weft.spawn { pool.checkout(acquire_timeout: 3) } } # a creation is in flight: they wait
      sleep 0.02
      pool.checkin(held) # the first waiter takes it, while the creation runs
      creator.wait
      assert_equal held, waiters.first.wait
      fresh = assert_elapsed_under(1.5) { waiters.last.wait } # a watch and a creation: 0.4 s
      refute_equal held, fresh
    end
    assert_equal 3, pool.statistics[:created]
  end

  # A checkout interrupted while it closes an expired resource (a close that waits, and the
  # task is cancelled there) or while it checks an idle one gives its reservation back: before,
  # the creation slot or the entry stayed taken for good, and at the limit every later checkout
  # timed out.
  def test_a_checkout_interrupted_in_a_close_or_a_check_gives_its_reservation_back
    slow = ->(*) { sleep 0.2 }
    closing = Weft::Pool.new(limit: 1, idle_timeout: 0.01, close: slow) { Object.new }
    checking = Weft::Pool.new(limit: 1, check: ->(_) { slow.call || true }) { Object.new }
    Weft.run do
      [closing, checking].each do |pool|
        pool.with { nil }
        sleep 0.02 # closing's idle resource expires
        task = Weft.spawn { pool.checkout }
        sleep 0.05 # it waits in the close or the check
        task.cancel
        assert_nil task.wait
        assert_equal 0, pool.statistics[:busy]
        assert pool.checkout(acquire_timeout: 0.5)
      end
    end
  end

  def test_discard_wakes_a_waiter_and_prune_and_clear
    pool, closed = build(limit: 1, idle_timeout: 0.05)
    held = pool.checkout
    Thread.new { sleep 0.05; pool.discard(held) }
    fresh = assert_elapsed_under(1) { pool.checkout(acquire_timeout: 1) }
    assert_equal 2, fresh.id
    pool.checkin(fresh)
    sleep 0.1
    assert_equal 1, pool.prune
    pool.with { nil }
    assert_equal 1, pool.clear
    assert_equal [1, 2, 3], closed
  end

  def test_close_retires_idle_then_returning_ones_and_refuses_checkout
    pool, closed = build(limit: 2)
    a = pool.checkout
    b = pool.checkout
    pool.checkin(a)
    pool.close
    assert_equal [1], closed
    pool.checkin(b)
    assert_equal [1, 2], closed
    assert_raises(Weft::Pool::ClosedError) { pool.checkout }
  end

  def test_checkin_of_a_foreign_resource_is_an_error_and_discard_is_idempotent
    pool, closed = build(limit: 1)
    assert_raises(Weft::Error) { pool.checkin(Object.new) }
    resource = pool.checkout
    pool.discard(resource)
    pool.discard(resource)
    pool.discard(Resource.new(99, false))
    assert_equal [1], closed
    assert_equal 0, pool.statistics[:size]
  end

  # With `adaptive: true`, holders at once follow the latency of the holds: against something
  # that serves two at a time and queues the rest (holders taking turns at two slots), they
  # stop at a few, and the rest wait in the pool even while resources lie idle; against
  # something that serves all at once, however slowly, every holder goes. Before, both had
  # all 32 at once.
  def test_adaptive_holders_at_once_follow_the_latency_of_the_holds
    slots = Thread::Queue.new
    2.times { slots << true }
    queued = ->(_) { slots << slots.pop.tap { sleep 0.02 } }
    parallel = ->(_) { sleep 0.05 }
    [[queued, 1..12], [parallel, 32..32]].each do |hold, expected|
      pool, = build(limit: 32, max_creating: 1, adaptive: true)
      peaks = Array.new(6) do
        peak = 0
        Weft.run do
          Weft.map(1..32) do
            pool.with do |resource|
              peak = [peak, pool.statistics[:busy]].max
              hold.call(resource)
            end
          end
        end
        peak
      end
      stats = pool.statistics
      assert_includes expected, peaks.last, "holders at once per burst: #{peaks} (#{stats})"
      assert_includes expected, stats[:in_flight_limit], stats.inspect
      assert_equal 32, stats[:size], "resources are not closed for the lower limit: they lie idle" if hold == queued
    end
  end

  # The growth rule's figures describe the holders and what the resources reach, not the
  # resources: a forked child keeps them while it forgets the parent's resources.
  def test_a_forked_child_keeps_the_growth_figures
    pool, = build(limit: 2)
    pool.with { sleep 0.01 }
    parent = pool.statistics.values_at(:hold_time, :create_time)
    assert(parent.all? { |seconds| seconds.is_a?(Float) })
    reader, writer = IO.pipe
    pid = fork do
      reader.close
      pool.discard(Object.new) # the child notices the fork here and forgets the parent's resources
      forgotten = pool.statistics.values_at(:size, :hold_time, :create_time)
      pool.with { nil }
      writer.write(Marshal.dump([forgotten, pool.statistics.values_at(:created, :hold_time)]))
      writer.close
      exit!(0)
    end
    writer.close
    Process.wait(pid)
    forgotten, (created, hold) = Marshal.load(reader.read) # rubocop:disable Security/MarshalLoad
    assert_equal [0, *parent], forgotten
    assert_equal 1, created, "the child creates its own resource"
    # One step of the running median from the parent's figure: down after the child's quick
    # hold, up if the child lost its core for longer than the parent's hold meanwhile (a hold
    # of `nil` lasting over 10 ms at load 7). Either step, not the one the test's own clock
    # around #with predicts: only the pool times the hold itself (from the creation's end), and
    # at load ~9 the child lost its core while it created (the clock around said "up", the pool
    # rightly moved down). A child that dropped the figures would hold its own hold, not one
    # step from the parent's.
    step = 1.0625
    one_step = [parent[0] / step, parent[0] * step]
    assert(one_step.any? { |expected| (expected - hold).abs <= expected * 1e-9 },
           "the parent's median hold #{parent[0]}, moved by one step after the child's hold: #{hold}")
    assert_equal 1, pool.statistics[:size]
  end

  def test_a_forked_child_does_not_receive_the_parents_resources
    pool, = build(limit: 2)
    parent = pool.with { |r| r }
    reader, writer = IO.pipe
    held = pool.checkout
    pid = fork do
      reader.close
      pool.discard(held) # the parent's: forgotten, not closed
      child = pool.with { |r| r }
      writer.write(child.equal?(parent) ? "shared" : "fresh #{pool.statistics[:created]}")
      writer.close
      exit!(0)
    end
    writer.close
    Process.wait(pid)
    assert_equal "fresh 1", reader.read
    refute parent.closed, "the child must not close the parent's resource"
    refute held.closed
    pool.checkin(held)
    assert_same held, pool.with { |r| r }
  end
end
