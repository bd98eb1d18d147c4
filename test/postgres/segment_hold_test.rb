# frozen_string_literal: true

require_relative "../test_helper"
require "weft/postgres"

# When a connection's reader reads a segment's answer inside the reactor's poll, it wakes the
# segment's other callers, which run on the next turn, and goes on with its own fiber's next
# statement at once. The end-of-turn flush holds that statement back for the next turn's, so
# that it goes out with theirs in one segment (Pipeline#hold_back), but only while the
# reactor's turns are short: on a reactor busy with CPU-bound fibers the wait would be a turn
# of their work. Both are seen from the server: the statements of one segment share its
# implicit transaction (and so `now()`), and `clock_timestamp()` tells when a statement ran.
class PostgresSegmentHoldTest < Minitest::Test
  include Weft::Test::PostgresPools

  # How long the CPU-bound fiber of the busy reactor keeps the reactor before it yields.
  SPIN = 0.02

  # `fibers` fibers run `sql` `rounds` times each through `db` (after one round to get them
  # pipelined); returns the first column of every answer, as Strings.
  def run_rounds(db, sql, fibers:, rounds:)
    answers = []
    Weft.gather(Array.new(fibers) do
      Weft.spawn do
        db.query(sql)
        rounds.times { answers << yield(db, sql) }
      end
    end)
    answers
  end

  def test_statements_of_fibers_woken_together_go_out_in_one_segment
    db = pool(limit: 2)
    fibers = 40
    rounds = 100
    reactor do
      starts = run_rounds(db, "select now()::text", fibers: fibers, rounds: rounds) { |pool, sql| pool.query(sql).getvalue(0, 0) }
      sizes = starts.tally.values # statements per segment
      alone = sizes.count(1) * 100.0 / sizes.size
      # Without the hold-back a third to half of the segments held one statement (the
      # reader's: 51-53% on 3.3 + YJIT, 33-39% on 3.1), with it 10-21% and 5-12% (a reader
      # whose statement settled alone wakes nobody, and goes on alone).
      assert_operator alone, :<, 27, "#{alone.round(1)}% of #{sizes.size} segments held one statement"
    end
    # Nearly all pipelined (a fiber's first statement, and one sent while the pipelines had
    # drained, may run alone on a connection).
    assert_operator db.statistics[:pipelined], :>=, fibers * rounds * 0.9
  end

  def test_on_a_busy_reactor_statements_are_written_at_the_end_of_their_turn
    db = pool(limit: 1)
    reactor do
      stop = false
      spinner = Weft.spawn do
        until stop
          started = now
          nil while now - started < SPIN
          sleep 0
        end
      end
      sql = "select extract(epoch from clock_timestamp())::float8"
      # How long after its caller handed it over each statement ran on the server (one clock).
      delays = run_rounds(db, sql, fibers: 4, rounds: 20) do |pool, statement|
        submitted = Time.now.to_f
        pool.query(statement).getvalue(0, 0).to_f - submitted
      end
      stop = true
      spinner.wait
      prompt = delays.count { |delay| delay < SPIN / 2 }
      # The readers' statements (about half of them here: the others wait for the spin of the
      # turn they were sent in, or in line for the connection) go out at the end of the turn
      # they were sent in, at once; held back, they waited for the next turn's spin (1 of 80 ran
      # within SPIN / 2 then, 31-40 with the guard).
      assert_operator prompt, :>=, delays.size / 4,
                      "#{prompt} of #{delays.size} statements ran within #{SPIN / 2}s of being sent, " \
                      "ms: #{delays.sort.map { |delay| (delay * 1000).round(1) }}"
    end
  end
end
