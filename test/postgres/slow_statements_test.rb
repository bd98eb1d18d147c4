# frozen_string_literal: true

require_relative "../test_helper"
require "weft/postgres"

# What the pool remembers of statements that ran long (Weft::Postgres::SlowStatements).
class PostgresSlowStatementsTest < Minitest::Test
  LONG = Weft::Postgres::SlowStatements::LONG

  Statement = Struct.new(:sql)

  # The machine's load as a test sets it: the share of its time the thread waited for a core
  # (see Weft::Postgres::CoreWait).
  class FixedLoad
    attr_accessor :share_now

    def initialize
      @share_now = 0.0
    end

    def tick(_now) = nil

    def share(_now) = @share_now
  end

  def setup
    @load = FixedLoad.new
    @slow = Weft::Postgres::SlowStatements.new(@load)
  end

  # An answer that came at once while the statements observed from 0.0 on were in flight: they
  # are judged by their own time.
  def answered_at_once
    @slow.answered(0.5, 0.5)
  end

  def test_a_statement_that_ran_long_alone_is_slow_until_it_runs_quickly
    @slow.observe("select pg_sleep(1)", LONG * 2, 0.0)
    assert @slow.slow?("select pg_sleep(1)")
    refute @slow.slow?("select 1")
    @slow.observe("select pg_sleep(1)", LONG / 10, 0.0)
    refute @slow.slow?("select pg_sleep(1)")
  end

  def test_a_slow_segment_makes_each_of_its_statements_suspect_and_a_quick_one_clears_them
    segment = [Statement.new("select 1"), Statement.new("select pg_sleep(1)")]
    answered_at_once
    @slow.observe_segment(segment, LONG * 2, 0.0)
    assert @slow.slow?("select 1")
    assert @slow.slow?("select pg_sleep(1)")
    @slow.observe_segment([Statement.new("select 1"), Statement.new("select 2")], LONG / 10, 0.0)
    refute @slow.slow?("select 1")
    assert @slow.slow?("select pg_sleep(1)")
  end

  def test_it_keeps_how_long_a_slow_statement_took_when_last_seen
    @slow.observe("select pg_sleep(1)", LONG * 3, 0.0)
    assert_in_delta LONG * 3, @slow.seconds("select pg_sleep(1)")
    answered_at_once
    @slow.observe_segment([Statement.new("select pg_sleep(1)"), Statement.new("select 1")], LONG * 5, 0.0)
    assert_in_delta LONG * 5, @slow.seconds("select pg_sleep(1)")
    assert_in_delta LONG * 5, @slow.seconds("select 1") # a segment's statements each take its time
    @slow.observe("select pg_sleep(1)", LONG / 10, 0.0)
    assert_nil @slow.seconds("select pg_sleep(1)")
  end

  # A segment's time counts for each of its statements as far as keeping them apart goes, but
  # only a trip of its own tells how long a statement runs: a `select 1` marked with a long
  # `pg_sleep` of its segment may not queue behind another slow statement on the strength of
  # that time (Pool#behind_slow: it waited behind a whole `pg_sleep(1.2)` there).
  def test_only_a_trip_of_its_own_tells_how_long_a_slow_statement_runs
    answered_at_once
    @slow.observe_segment([Statement.new("select pg_sleep(1)"), Statement.new("select 1")], LONG * 5, 0.0)
    assert @slow.slow?("select 1")
    assert_nil @slow.seconds_alone("select 1")
    assert_nil @slow.seconds_alone("select pg_sleep(1)")
    @slow.observe("select pg_sleep(1)", LONG * 4, 0.0)
    assert_in_delta LONG * 4, @slow.seconds_alone("select pg_sleep(1)")
    answered_at_once
    @slow.observe_segment([Statement.new("select pg_sleep(1)"), Statement.new("select 2")], LONG * 6, 0.0)
    assert_nil @slow.seconds_alone("select pg_sleep(1)"), "last found long in a segment with another"
    answered_at_once
    @slow.observe_segment([Statement.new("select pg_sleep(1)")], LONG * 7, 0.0)
    assert_in_delta LONG * 7, @slow.seconds_alone("select pg_sleep(1)"), 1e-9, "a segment of one is its own trip"
    @slow.observe("select pg_sleep(1)", LONG / 10, 0.0)
    assert_nil @slow.seconds_alone("select pg_sleep(1)")
  end

  def test_marked_counts_every_statement_found_running_long
    @slow.observe("select pg_sleep(1)", LONG * 2, 0.0)
    @slow.observe("select pg_sleep(1)", LONG * 2, 0.0) # known already: counts again
    answered_at_once
    @slow.observe_segment([Statement.new("select 1"), Statement.new("select 2")], LONG, 0.0)
    @slow.observe("select 3", LONG / 10, 0.0)
    @slow.observe_segment([Statement.new("select 4")], LONG / 10, 0.0)
    assert_equal 4, @slow.marked
  end

  # A machine whose cores are all busy makes the server late with everything: a statement is
  # long only by what it took beyond the quickest answer read while it was in flight.
  def test_a_statement_is_judged_against_the_answers_read_while_it_was_in_flight
    started = 100.0
    @slow.answered(started - 0.001, started + 0.015) # answered meanwhile, within 16 ms at most
    @slow.observe("select 1", 0.016, started) # known to have taken 16 ms: the load's, not its own
    refute @slow.slow?("select 1")
    @slow.observe_segment([Statement.new("select 2")], 0.016, started)
    refute @slow.slow?("select 2")
    @slow.observe("select pg_sleep(0.05)", 0.048, started) # 32 ms more than the quickest
    assert @slow.slow?("select pg_sleep(0.05)")
    assert_in_delta 0.048, @slow.seconds("select pg_sleep(0.05)") # its own time is kept
    assert_equal 1, @slow.marked
  end

  # An unclear trip (long, but not clearly longer than the others of its time) makes the
  # statement suspect; a second one that began after the first was known to be late marks it.
  def test_an_unclear_statement_is_marked_when_found_so_again_in_a_later_trip
    @slow.answered(99.999, 100.016)
    @slow.observe("select pg_sleep(0.05)", 0.025, 100.0) # late by 100.025 at least
    refute @slow.slow?("select pg_sleep(0.05)")
    @slow.answered(100.019, 100.040)
    @slow.observe("select pg_sleep(0.05)", 0.020, 100.02) # began before: the same spell of load
    refute @slow.slow?("select pg_sleep(0.05)")
    @slow.answered(100.049, 100.070)
    @slow.observe("select pg_sleep(0.05)", 0.025, 100.05)
    assert @slow.slow?("select pg_sleep(0.05)")
    assert_in_delta 0.025, @slow.seconds("select pg_sleep(0.05)")
    assert_equal 1, @slow.marked
  end

  def test_a_quick_trip_clears_a_suspect_and_a_segment_makes_each_of_its_statements_suspect
    @slow.answered(99.999, 100.016)
    @slow.observe_segment([Statement.new("select 1"), Statement.new("select 1"), Statement.new("select 2")], 0.016, 100.0)
    @slow.observe_segment([Statement.new("select 1")], LONG / 10, 100.1) # quick: cleared
    @slow.answered(100.199, 100.216)
    @slow.observe_segment([Statement.new("select 1"), Statement.new("select 2")], 0.016, 100.2)
    refute @slow.slow?("select 1") # suspect again, from scratch
    assert @slow.slow?("select 2") # found unclear twice
    assert_equal 1, @slow.marked
  end

  def test_an_unclear_trip_keeps_a_statement_known_as_slow
    @slow.observe("select pg_sleep(0.05)", 0.05, 100.0) # nothing to compare with: clear
    @slow.answered(100.099, 100.116)
    @slow.observe("select pg_sleep(0.05)", 0.016, 100.1)
    assert @slow.slow?("select pg_sleep(0.05)")
    assert_equal 1, @slow.marked
  end

  # A statement sent alone with nothing else in flight has nothing to be compared with; a
  # segment is sent while every connection is in use, and no answer from any of them is unclear.
  def test_with_no_answer_meanwhile_a_statement_alone_is_long_and_a_segment_unclear
    @slow.observe("select pg_sleep(0.05)", 0.05, 100.0)
    assert @slow.slow?("select pg_sleep(0.05)")
    @slow.observe_segment([Statement.new("select 1")], 0.016, 100.0)
    refute @slow.slow?("select 1")
    @slow.observe_segment([Statement.new("select 1")], 0.016, 100.1)
    assert @slow.slow?("select 1")
  end

  def test_only_answers_read_after_a_statement_started_count
    started = 100.0
    @slow.answered(started - 0.030, started) # read as it started: not in flight with it
    @slow.answered(started - 0.005, started + 0.020) # read meanwhile: took 25 ms at most
    @slow.observe("select pg_sleep(0.036)", 0.036, started)
    assert @slow.slow?("select pg_sleep(0.036)")
  end

  def test_a_quick_contemporary_does_not_clear_a_statement_that_was_quick_itself
    @slow.observe("select pg_sleep(1)", LONG * 2, 0.0)
    @slow.answered(99.0, 100.2)
    @slow.observe("select pg_sleep(1)", LONG / 10, 100.0)
    refute @slow.slow?("select pg_sleep(1)")
  end

  def test_only_the_latest_answers_are_kept
    started = 100.0
    @slow.answered(started, started + 0.001) # quick, but pushed out by the slow ones after it
    Weft::Postgres::RecentAnswers::SIZE.times { |i| @slow.answered(started, started + 0.02 + i * 0.001) }
    @slow.observe("select 1", 0.031, started)
    assert @slow.slow?("select 1")
  end

  # A machine whose cores are all taken holds up the server as much as this process: a trip
  # counts less the share of it this thread waited for a core.
  def test_on_a_loaded_machine_a_trip_counts_less_the_share_of_the_load
    @load.share_now = 0.6
    @slow.observe("select 1", 0.02, 100.0) # alone, nothing answered meanwhile: 8 ms its own
    refute @slow.slow?("select 1")
    @slow.observe_segment([Statement.new("select 2")], 0.02, 100.1)
    @slow.observe_segment([Statement.new("select 2")], 0.02, 100.2)
    refute @slow.slow?("select 2")
    assert_equal 0, @slow.marked
  end

  # Loaded, a statement alone with nothing to compare it with is suspect at first, as a segment
  # is, and marked at its next long trip; a long one stays long when the load's share is taken off.
  def test_on_a_loaded_machine_a_long_statement_alone_is_marked_at_its_second_trip
    @load.share_now = 0.8
    @slow.observe("select pg_sleep(0.2)", 0.2, 100.0) # 176 ms its own (the load: 24 at most)
    refute @slow.slow?("select pg_sleep(0.2)")
    @slow.observe("select pg_sleep(0.2)", 0.2, 100.3)
    assert @slow.slow?("select pg_sleep(0.2)")
    assert_in_delta 0.2, @slow.seconds("select pg_sleep(0.2)") # its whole time is kept
    @load.share_now = 0.0
    @slow.observe("select pg_sleep(0.05)", 0.05, 101.0) # an idle machine: long at once
    assert @slow.slow?("select pg_sleep(0.05)")
  end

  # A short statement marked before the load came is cleared by a trip the load explains, so
  # that it does not go alone for as long as the load lasts.
  # The load holds a backend up while it waits for a core, not while it sleeps.
  def test_the_load_explains_a_bounded_part_of_a_long_trip
    @load.share_now = 0.8 # scaled whole, 9 ms: quick
    @slow.answered(99.999, 100.02)
    @slow.observe_segment([Statement.new("select pg_sleep(0.05)")], 0.045, 100.0) # 21 ms its own, unclear
    @slow.answered(100.099, 100.12)
    @slow.observe_segment([Statement.new("select pg_sleep(0.05)")], 0.045, 100.1)
    assert @slow.slow?("select pg_sleep(0.05)")
  end

  def test_a_trip_the_load_explains_clears_a_statement_known_as_slow
    @slow.observe("select 1", 0.02, 100.0) # idle: long
    assert @slow.slow?("select 1")
    @load.share_now = 0.7
    @slow.observe("select 1", 0.03, 100.1) # 9 ms its own
    refute @slow.slow?("select 1")
  end

  def test_memory_is_bounded_and_forgets_the_longest_unseen_first
    memory = Weft::Postgres::SlowStatements::MEMORY
    @slow.observe("first", LONG, 0.0)
    (1..memory).each do |i|
      @slow.observe("first", LONG, 0.0) if i == memory / 2 # seen slow again: kept longer
      @slow.observe("statement #{i}", LONG, 0.0)
    end
    assert @slow.slow?("first")
    refute @slow.slow?("statement 1")
    assert @slow.slow?("statement #{memory}")
  end
end
