# frozen_string_literal: true

require_relative "test_helper"
require "weft/thread_statistics"

# A thread's scheduler statistics (Weft::ThreadStatistics): its seconds on a core and waiting
# for one, read once or from a file kept open, nil where Linux keeps none.
class ThreadStatisticsTest < Minitest::Test
  ThreadStatistics = Weft::ThreadStatistics

  def setup
    skip "no per-thread scheduler statistics here" unless File.readable?(ThreadStatistics::CALLING_THREAD)
  end

  # A thread's time on a core is its CPU time, whatever the load: read from another thread,
  # the figures grow by what the thread itself measured while it computed.
  def test_a_thread_read_from_another_grows_by_its_own_cpu_time
    go = Thread::Queue.new
    done = Thread::Queue.new
    worker = Thread.new do
      go.pop
      started = thread_cpu
      nil while thread_cpu - started < 0.1 # 0.1 s of CPU, however long the load makes it
      done << thread_cpu - started
      go.pop # read meanwhile
    end
    kept = ThreadStatistics.new(worker).keep_open
    once = ThreadStatistics.new(worker)
    sleep 0.01 until worker.status == "sleep"
    before = [kept.read, once.read]
    go << true
    computed = done.pop
    sleep 0.01 until worker.status == "sleep"
    after = [kept.read, once.read]
    go << true
    worker.join
    [before, after].flatten(1).each do |figures|
      assert_kind_of Float, figures[0], figures.inspect
      assert_operator figures[1], :>=, 0.0, figures.inspect
    end
    %w[kept once].each_with_index do |reader, index|
      assert_in_delta computed, after[index][0] - before[index][0], 0.02, "#{reader}: #{before.inspect} #{after.inspect}"
      assert_operator after[index][1], :>=, before[index][1], reader
    end
  ensure
    kept&.close
  end

  def test_the_calling_threads_figures_grow
    first = ThreadStatistics.calling_thread
    started = thread_cpu
    nil while thread_cpu - started < 0.1
    second = ThreadStatistics.calling_thread
    # Linux brings a running thread's figure up to date at each scheduler tick (1-10 ms).
    assert_operator second[0] - first[0], :>=, 0.05, [first, second].inspect
    assert_operator second[1], :>=, first[1]
  end

  # A thread that has ended has no file: nil, read once or kept open.
  def test_no_figures_for_a_thread_whose_file_is_missing
    ended = Thread.new {}.tap(&:join)
    assert_nil ThreadStatistics.new(ended).read
    reader = ThreadStatistics.new(ended).keep_open
    assert_nil reader.read
    reader.close
  end

  def test_text_that_is_not_a_schedstat_line_gives_none
    assert_equal [1.5, 0.25], ThreadStatistics.parse("1500000000 250000000 7\n")
    [nil, "", "\n", "12", "a b c"].each { |text| assert_nil ThreadStatistics.parse(text), text.inspect }
  end

  # In a forked child a file kept open would go on reading the parent's thread: the reader
  # drops it, and reads the child's thread (Ruby 3.3 gives the thread that forked the child's
  # id) or nothing (Ruby 3.1), never the parent's figures.
  def test_a_reader_kept_open_across_a_fork_does_not_read_the_parents_thread
    reader = ThreadStatistics.new(Thread.current).keep_open
    started = thread_cpu
    nil while thread_cpu - started < 0.05 # this thread has run at least this long
    parents = reader.read
    from_child, to_parent = IO.pipe
    pid = fork do
      from_child.close
      to_parent.write(Marshal.dump(reader.read))
      to_parent.close
      exit!(0)
    end
    to_parent.close
    childs = Marshal.load(from_child.read)
    Process.wait(pid)
    assert(childs.nil? || childs[0] < parents[0], "the child read #{childs.inspect}, the parent #{parents.inspect}")
  ensure
    from_child&.close
    reader&.close
  end

  private

  def thread_cpu
    Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID)
  end
end
