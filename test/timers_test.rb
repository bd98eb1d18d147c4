# frozen_string_literal: true

require_relative "test_helper"

class TimersTest < Minitest::Test
  def setup
    @timers = Weft::Timers.new
  end

  def test_fires_in_deadline_order
    fired = []
    [0.03, 0.01, 0.02].each { |delay| @timers.after(delay) { fired << delay } }
    sleep 0.04
    assert_equal 3, @timers.fire
    assert_equal [0.01, 0.02, 0.03], fired
    assert_equal 0, @timers.size
  end

  def test_only_due_timers_fire
    fired = []
    @timers.after(0) { fired << :now }
    @timers.after(10) { fired << :later }
    @timers.fire
    assert_equal [:now], fired
    assert_equal 1, @timers.size
  end

  def test_next_deadline_is_the_earliest_live_one
    assert_nil @timers.next_deadline
    later = @timers.after(10) {}
    sooner = @timers.after(5) {}
    @timers.after(10) {} # chained behind `later`, not in the heap
    assert_equal sooner.deadline, @timers.next_deadline
    sooner.cancel
    assert_equal later.deadline, @timers.next_deadline
  end

  def test_cancel_removes_the_timer_at_once
    timers = Array.new(100) { |i| @timers.after(i) {} }
    timers.each_with_index { |timer, i| timer.cancel if i.odd? }
    assert_equal 50, @timers.size
    refute timers[1].active?
    assert timers[0].active?
    timers[1].cancel # twice is harmless
    assert_equal 50, @timers.size
  end

  def test_heap_stays_ordered_through_random_cancels
    random = Random.new(42)
    fired = []
    # Deadlines in the past, so one #fire runs every survivor; the order it runs them in is the
    # heap's order.
    timers = Array.new(500) do
      timer = @timers.after(-random.rand(100.0)) { fired << timer.deadline }
    end
    timers.sample(250, random: random).each(&:cancel)
    assert_equal 250, @timers.fire
    assert_equal fired.sort, fired
  end

  # Timers of one duration share a FIFO list; interleaved durations, cancels at the head, in the
  # middle and at the tail of lists, and lists that empty and come back must still fire in
  # deadline order.
  def test_interleaved_durations_fire_in_deadline_order
    random = Random.new(7)
    fired = []
    timers = []
    durations = [-0.3, -0.2, -0.1, -0.25]
    200.times do |i|
      duration = durations[i % durations.size]
      timers << @timers.after(duration) { fired << i }
    end
    cancelled = [0, 1, 2, 3, 199, 198] + timers.each_index.to_a.sample(60, random: random)
    cancelled.uniq.each { |i| timers[i].cancel }
    live = timers.each_index.reject { |i| cancelled.include?(i) }
    assert_equal live.size, @timers.size
    assert_equal live.size, @timers.fire
    deadlines = fired.map { |i| timers[i].deadline }
    assert_equal deadlines.sort, deadlines
    assert_equal live.sort, fired.sort
    assert_nil @timers.wait_interval
    @timers.after(-0.1) { fired << :again } # the emptied list's duration, armed anew
    assert_equal 1, @timers.fire
    assert_equal :again, fired.last
  end

  # Durations that repeat and durations seen once, re-armed (#reschedule) and cancelled at random
  # while armed: every survivor fires once, in deadline order, and the count stays exact throughout.
  def test_random_arms_moves_and_cancels_keep_order_and_count
    random = Random.new(3)
    fired = []
    live = {}.compare_by_identity
    durations = [-0.5, -0.4, -0.3] + Array.new(20) { -random.rand(1.0) }
    timers = Array.new(400) do
      timer = @timers.after(durations.sample(random: random)) { fired << timer }
      live[timer] = true
      timer
    end
    300.times do
      timer = timers.sample(random: random)
      case random.rand(3)
      when 0
        timer.cancel
        live.delete(timer)
      when 1
        timer.reschedule(durations.sample(random: random))
        live[timer] = true
      else
        timers << (fresh = @timers.after(durations.sample(random: random)) { fired << fresh })
        live[fresh] = true
      end
      assert_equal live.size, @timers.size
    end
    assert_equal live.size, @timers.fire
    assert_equal live.keys.sort_by(&:object_id), fired.sort_by(&:object_id)
    deadlines = fired.map(&:deadline)
    assert_equal deadlines.sort, deadlines
    assert_equal 0, @timers.size
    assert_nil @timers.wait_interval
  end

  def test_a_callable_instead_of_a_block
    callable = Object.new
    def callable.calls = @calls ||= 0
    def callable.call = @calls = calls + 1
    2.times { @timers.after(0, callable) }
    @timers.fire
    assert_equal 2, callable.calls
  end

  def test_reschedule_moves_a_live_or_fired_timer
    fired = 0
    timer = @timers.after(0) { fired += 1 }
    timer.reschedule(10)
    @timers.fire
    assert_equal 0, fired
    timer.reschedule(0)
    @timers.fire
    assert_equal 1, fired
    timer.reschedule(0) # re-arms a fired timer
    @timers.fire
    assert_equal 2, fired
  end

  def test_wait_interval
    assert_nil @timers.wait_interval
    @timers.after(5) {}
    assert_in_delta 5, @timers.wait_interval, 0.1
    @timers.after(-1) {}
    assert_equal 0, @timers.wait_interval
  end

  # A NaN deadline compares false with everything: sifted to the top of the heap, it never came
  # due and held back every timer below it (a sleep under Weft.timeout(Float::NAN) ended at once,
  # another never).
  def test_nan_is_refused
    assert_raises(ArgumentError) { @timers.after(Float::NAN) {} }
    timer = @timers.after(1) {}
    assert_raises(ArgumentError) { timer.reschedule(Float::NAN) }
    assert timer.active?
    @timers.after(0) {}
    assert_equal 1, @timers.fire # the heap is intact: the due timer fires, the other waits
    assert_equal 1, @timers.size
  end

  # The poll that waits for the next timer takes the interval as its timeout; a selector raised
  # EINVAL for one of Float::INFINITY or 1e19 s.
  def test_wait_interval_is_bounded_for_distant_timers
    @timers.after(Float::INFINITY) {}
    assert_equal Weft::Timers::LONGEST_WAIT, @timers.wait_interval
    @timers.after(1e19) {}
    assert_equal Weft::Timers::LONGEST_WAIT, @timers.wait_interval
    assert_equal 0, @timers.fire
  end
end
