# frozen_string_literal: true

require_relative "../test_helper"
require "weft/postgres"

# The machine's load as this thread sees it (Weft::Postgres::CoreWait): the share of a recent
# span it waited for a core.
class PostgresSlowStatementsCoreWaitTest < Minitest::Test
  CoreWait = Weft::Postgres::CoreWait

  def setup
    @wait = 0.0 # seconds the "thread" has waited for a core, as the fake statistics say
    @core_wait = CoreWait.new(-> { @wait })
    @start = Weft::Timers.now # the first reading was made as it was made
  end

  def test_the_share_is_the_wait_over_the_span_since_the_latest_reading
    @core_wait.tick(@start + 1.0)
    @wait = 0.06
    assert_in_delta 0.6, @core_wait.share(@start + 1.1)
  end

  def test_answers_read_within_a_sample_of_the_latest_reading_take_none
    @core_wait.tick(@start + 1.0)
    @wait = 0.5
    @core_wait.tick(@start + 1.0 + CoreWait::SAMPLE / 2) # not read: the 0.5 s is still in the span
    assert_in_delta 1.0, @core_wait.share(@start + 1.2)
  end

  def test_a_reading_too_recent_to_measure_over_leaves_the_one_before_as_the_start
    @core_wait.tick(@start + 1.0)
    @wait = 0.05
    @core_wait.tick(@start + 1.1)   # the latest reading
    @wait = 0.06
    # 1 ms after the latest: measured from the one before it, 101 ms
    assert_in_delta 0.06 / 0.101, @core_wait.share(@start + 1.101), 1e-9
  end

  def test_no_share_where_the_statistics_are_missing_or_from_another_thread
    assert_equal 0.0, CoreWait.new(-> {}).share(@start + 1.0)
    Thread.new { @core_wait.tick(@start + 1.0) }.join # a reading of another thread
    @wait = 0.5
    assert_equal 0.0, @core_wait.share(@start + 1.5)
  end

  def test_it_reads_this_threads_statistics_on_linux
    skip "no /proc/thread-self/schedstat here" unless File.readable?(CoreWait::SCHEDSTAT)
    first = CoreWait.thread_wait
    assert_kind_of Float, first
    assert_operator CoreWait.thread_wait, :>=, first
  end
end
