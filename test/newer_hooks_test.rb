# frozen_string_literal: true

require_relative "test_helper"

# The scheduler hooks newer Rubies add, under Weft: each test skips where its hook does not
# exist (the suite runs on 3.1 in CI; `bin/test --ruby 3.3` runs them). IO#timeout and
# IO#pread/#pwrite are not here: under Weft on 3.3.8 both hang (found 2026-11-24, not fixed yet).
class NewerHooksTest < Minitest::Test
  def test_io_select_waits_without_blocking_the_other_tasks
    skip "IO.select reaches the scheduler from Ruby 3.2" if RUBY_VERSION < "3.2"
    pipes = Array.new(10) { IO.pipe }
    results, seconds = timed do
      Weft.run do
        waiting = pipes.map { |reader, _| Weft.spawn { IO.select([reader], nil, nil, 0.5) } }
        ready = Weft.spawn do
          sleep 0.1
          pipes.first.last.write("x")
        end
        ready.wait
        waiting.map(&:wait)
      end
    end
    assert_operator seconds, :<, 2, "ten 0.5 s selects did not overlap"
    assert_equal [pipes.first.first], results.first.first
    assert_equal [nil] * 9, results.drop(1)
  ensure
    pipes&.flatten&.each(&:close)
  end
end
