# frozen_string_literal: true

require_relative "../test_helper"
require "weft/postgres"

# What the pool remembers of statements that ran long (Weft::Postgres::SlowStatements).
class PostgresSlowStatementsTest < Minitest::Test
  LONG = Weft::Postgres::SlowStatements::LONG

  Statement = Struct.new(:sql)

  def setup
    @slow = Weft::Postgres::SlowStatements.new
  end

  def test_a_statement_that_ran_long_alone_is_slow_until_it_runs_quickly
    @slow.observe("select pg_sleep(1)", LONG * 2)
    assert @slow.slow?("select pg_sleep(1)")
    refute @slow.slow?("select 1")
    @slow.observe("select pg_sleep(1)", LONG / 10)
    refute @slow.slow?("select pg_sleep(1)")
  end

  def test_a_slow_segment_makes_each_of_its_statements_suspect_and_a_quick_one_clears_them
    segment = [Statement.new("select 1"), Statement.new("select pg_sleep(1)")]
    @slow.observe_segment(segment, LONG * 2)
    assert @slow.slow?("select 1")
    assert @slow.slow?("select pg_sleep(1)")
    @slow.observe_segment([Statement.new("select 1"), Statement.new("select 2")], LONG / 10)
    refute @slow.slow?("select 1")
    assert @slow.slow?("select pg_sleep(1)")
  end

  def test_it_keeps_how_long_a_slow_statement_took_when_last_seen
    @slow.observe("select pg_sleep(1)", LONG * 3)
    assert_in_delta LONG * 3, @slow.seconds("select pg_sleep(1)")
    @slow.observe_segment([Statement.new("select pg_sleep(1)"), Statement.new("select 1")], LONG * 5)
    assert_in_delta LONG * 5, @slow.seconds("select pg_sleep(1)")
    assert_in_delta LONG * 5, @slow.seconds("select 1") # a segment's statements each take its time
    @slow.observe("select pg_sleep(1)", LONG / 10)
    assert_nil @slow.seconds("select pg_sleep(1)")
  end

  def test_marked_counts_every_statement_found_running_long
    @slow.observe("select pg_sleep(1)", LONG * 2)
    @slow.observe("select pg_sleep(1)", LONG * 2) # known already: counts again
    @slow.observe_segment([Statement.new("select 1"), Statement.new("select 2")], LONG)
    @slow.observe("select 3", LONG / 10)
    @slow.observe_segment([Statement.new("select 4")], LONG / 10)
    assert_equal 4, @slow.marked
  end

  def test_memory_is_bounded_and_forgets_the_longest_unseen_first
    memory = Weft::Postgres::SlowStatements::MEMORY
    @slow.observe("first", LONG)
    (1..memory).each do |i|
      @slow.observe("first", LONG) if i == memory / 2 # seen slow again: kept longer
      @slow.observe("statement #{i}", LONG)
    end
    assert @slow.slow?("first")
    refute @slow.slow?("statement 1")
    assert @slow.slow?("statement #{memory}")
  end
end
