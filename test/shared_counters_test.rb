# frozen_string_literal: true

require_relative "test_helper"
require "weft/shared_counters"

# Weft::SharedCounters: cells a process shares with the children it forks afterwards.
class SharedCountersTest < Minitest::Test
  def test_a_child_writes_what_the_parent_then_reads
    counters = Weft::SharedCounters.new(4)
    assert_equal 4, counters.size
    assert_equal [0, 0, 0, 0], Array.new(4) { |index| counters[index] }
    counters[1] = 7
    pid = fork do
      counters[2] = counters[1] + Process.pid
      exit!(0)
    end
    Process.wait(pid)
    assert_equal 7 + pid, counters[2]
    assert_equal(-5, counters[3] = -5)
    assert_equal(-5, counters[3])
  end

  def test_adds_from_several_processes_at_once_all_count
    counters = Weft::SharedCounters.new(1)
    pids = Array.new(3) do
      fork do
        20_000.times { counters.add(0, 1) }
        exit!(0)
      end
    end
    pids.each { |pid| Process.wait(pid) }
    assert_equal 60_000, counters[0]
    assert_equal 59_990, counters.add(0, -10)
  end

  def test_a_cell_outside_the_table_or_a_bad_size_is_refused
    counters = Weft::SharedCounters.new(2)
    assert_raises(IndexError) { counters[2] }
    assert_raises(IndexError) { counters[-1] = 1 }
    assert_raises(IndexError) { counters.add(5, 1) }
    assert_raises(ArgumentError) { Weft::SharedCounters.new(0) }
    assert_raises(IOError) { Weft::SharedCounters.allocate[0] }
  end

  # A copy would map memory of its own, shared with nobody: refused rather than handed out as
  # a table that looks shared and is not.
  def test_a_copy_is_refused
    counters = Weft::SharedCounters.new(2)
    assert_raises(TypeError) { counters.dup }
    assert_raises(TypeError) { counters.clone }
    counters[0] = 7
    assert_equal 7, counters[0]
  end
end
