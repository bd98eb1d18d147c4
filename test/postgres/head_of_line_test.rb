# frozen_string_literal: true

require_relative "../test_helper"
require "weft/postgres"

# A statement whose caller times out or is cancelled must not hold up the statements queued
# behind it on the same connection: the pool cancels it on the server and the others run on.
# Measured against the real server: the callers' times, the statements' results, and
# pg_stat_activity (read on a connection of its own) for statements left running.
class PostgresHeadOfLineTest < Minitest::Test
  # How late after its timeout a caller may get the error (a loaded machine: generous). The
  # defect these bounds guard is a caller kept waiting for its statement's 30 s; 0.88 s (a
  # 0.5 s timeout on a reactor running 20 busy fibers, beside three helpers' work, load ~10)
  # failed a bound of 0.3 once.
  LATE = 0.75

  include Weft::Test::PostgresPools


  # Fills the only connection with a statement running alone, so that the statements spawned
  # next wait and then go down one pipeline together, in spawn order.
  def occupy(db, seconds = 0.1)
    blocker = Weft.spawn { db.query("select pg_sleep(#{seconds})") }
    sleep 0.02
    blocker
  end

  # The ways a caller waiting for its statement can be interrupted, each 0.5 s after it starts:
  # the error it gets and how to run its statement under it. A cancelled task is cancelled from
  # outside by `interrupt`.
  INTERRUPTIONS = {
    weft_timeout: [Weft::TimeoutError, ->(statement) { Weft.timeout(0.5, &statement) }],
    weft_deadline: [Weft::DeadlineExceeded, ->(statement) { Weft.deadline(0.5, &statement) }],
    stdlib_timeout: [Timeout::Error, ->(statement) { Timeout.timeout(0.5, &statement) }],
    task_cancel: [Weft::Cancelled, ->(statement) { statement.call }],
  }.freeze

  # One caller is interrupted on a 30 s statement; 20 callers wait behind it on the one
  # connection. `pipelined`: they are all in the connection's pipeline, the slow one at its
  # head; else the slow one runs alone on the connection and the others wait for the
  # connection itself. Returns how long the slow caller took and how long the 20 took.
  def run_twenty_behind_an_interrupted_caller(db, tag, pipelined:, interruption: :weft_timeout)
    error_class, interrupt = INTERRUPTIONS.fetch(interruption)
    blocker = occupy(db) if pipelined
    slow = Weft.spawn { timed { interrupt.call(proc { db.query("select pg_sleep(30), '#{tag}'") }) } }
    sleep 0.01 unless pipelined # it takes the connection first
    behind = Array.new(20) { |i| Weft.spawn { db.query("select 1, $1::int", i).getvalue(0, 1).to_i } }
    started = now
    if interruption == :task_cancel
      sleep 0.5
      slow.cancel
    end
    blocker&.wait
    outcome, took = slow.wait
    assert_kind_of error_class, outcome
    assert_operator took, :<, 0.5 + LATE, "the interrupted caller waited #{took}s"
    assert_equal (0...20).to_a, Weft.gather(behind)
    total = now - started
    assert_operator total, :<, 3.0, "the 20 statements behind it took #{total}s"
    if pipelined
      assert_operator db.statistics[:max_depth], :>=, 21, "the statements were not pipelined together"
    end
    assert_equal "after", db.query("select 'after'").getvalue(0, 0)
    assert_gone_from_server(tag, within: 2.0)
    [took, total]
  end

  def report(label, took, total)
    return unless ENV["VERBOSE_BENCH"]
    puts format("%-34s interrupted caller %.3fs, 20 behind done after %.3fs", label, took, total)
  end

  INTERRUPTIONS.each_key do |interruption|
    define_method(:"test_twenty_statements_pipelined_behind_one_interrupted_by_#{interruption}_finish_promptly") do
      db = pool(limit: 1)
      reactor do
        took, total = run_twenty_behind_an_interrupted_caller(db, "hol-#{interruption}", pipelined: true,
                                                                                         interruption: interruption)
        report("pipelined, #{interruption}", took, total)
      end
      assert_equal 0, db.statistics[:discarded]
      assert_equal 0, db.statistics[:busy]
    end
  end

  def test_twenty_statements_waiting_for_a_timed_out_ones_connection_finish_promptly
    db = pool(limit: 1)
    reactor do
      took, total = run_twenty_behind_an_interrupted_caller(db, "hol-alone", pipelined: false)
      report("alone, weft_timeout", took, total)
    end
    assert_equal 0, db.statistics[:discarded]
    assert_equal 0, db.statistics[:busy]
  end

  # A cancel request opens a connection to the server and waits for it to act: here the proxy
  # holds it back 0.5 s. The reactor keeps turning meanwhile (pg's cancel waits on its socket
  # through the scheduler), and the statements behind go on once it is through.
  def test_a_slow_cancel_request_does_not_block_the_reactor
    proxy = Weft::Test::HoldingProxy.new(postgres.host, postgres.port)
    db = pool(limit: 1, target: "postgres://postgres@127.0.0.1:#{proxy.port}/postgres")
    reactor do
      db.query("select 1") # connects before connections are held back
      proxy.hold = 0.5
      gaps = []
      ticking = true
      ticker = Weft.spawn do
        last = now
        while ticking
          sleep 0.005
          gaps << (now - last)
          last = now
        end
      end
      took, total = begin
        run_twenty_behind_an_interrupted_caller(db, "hol-slow-cancel", pipelined: true)
      ensure
        ticking = false
        ticker.wait
      end
      report("pipelined, cancel held 0.5s", took, total)
      assert_operator total, :>, 0.9, "the cancel request was not held back"
      assert_operator gaps.max, :<, 0.1, "the reactor stood still for #{gaps.max}s"
    end
    assert_equal 0, db.statistics[:discarded]
  ensure
    proxy&.close
  end

  # Three callers a second time out on 30 s statements, for 4 s, while 20 fibers run short
  # statements on the same 4 connections: in every half second some of those finish (without
  # cancellation the slow statements would hold every connection within 2 s: throughput 0).
  def test_three_timeouts_a_second_do_not_starve_other_statements
    db = pool(limit: 4)
    reactor do
      finished = []
      stop = false
      workers = Array.new(20) do |i|
        Weft.spawn do
          until stop
            db.query("select $1::int", i)
            finished << now
          end
        end
      end
      started = now
      slow = Array.new(12) do |i|
        sleep((started + (i / 3.0)) - now) if started + (i / 3.0) > now
        Weft.spawn { timed { Weft.timeout(0.5) { db.query("select pg_sleep(30), 'hol-storm'") } } }
      end
      sleep((started + 4.5) - now)
      stop = true
      Weft.gather(workers)
      slow.each do |task|
        outcome, took = task.wait
        assert_kind_of Weft::TimeoutError, outcome
        assert_operator took, :<, 0.5 + LATE
      end
      windows = (0...9).map do |w|
        finished.count { |at| at >= started + (w * 0.5) && at < started + ((w + 1) * 0.5) }
      end
      assert_operator windows.min, :>, 0, "half a second with no statement finished: #{windows.inspect}"
      assert_gone_from_server("hol-storm", within: 2.0)
      assert_equal "after", db.query("select 'after'").getvalue(0, 0)
      puts "statements per 0.5 s: #{windows.inspect}" if ENV["VERBOSE_BENCH"]
    end
    assert_equal 0, db.statistics[:discarded]
  end
end
