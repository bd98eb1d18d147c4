# frozen_string_literal: true

require_relative "../test_helper"
require "weft/resilience"

class RetryBudgetTest < Minitest::Test
  def test_retries_are_a_share_of_calls
    budget = Weft::RetryBudget.new(ratio: 0.5, min_per_second: 0)
    refute budget.withdraw, "no calls, no reserve: no retry"
    4.times { budget.deposit }
    assert_equal 2, budget.available
    assert budget.withdraw
    assert budget.withdraw
    refute budget.withdraw
    assert_equal 0, budget.available
    assert_equal 4, budget.calls
    assert_equal 2, budget.retries
  end

  def test_the_reserve_allows_min_per_second_retries_over_the_window_without_calls
    budget = Weft::RetryBudget.new(ratio: 0, min_per_second: 5, window: 2)
    assert_equal 10, budget.available
    assert_equal [true] * 10 + [false], Array.new(11) { budget.withdraw }
  end

  def test_the_window_slides
    budget = Weft::RetryBudget.new(ratio: 0, min_per_second: 10, window: 0.2) # 2 retries per 0.2 s
    assert_equal [true, true, false], Array.new(3) { budget.withdraw }
    sleep 0.25
    assert_equal 0, budget.retries, "the retries aged out"
    assert_equal [true, true, false], Array.new(3) { budget.withdraw }
  end

  def test_bad_options_raise_argument_error
    [
      { ratio: -0.1 }, { ratio: 1.1 }, { ratio: "0.2" }, { ratio: Float::NAN },
      { min_per_second: -1 }, { min_per_second: Float::INFINITY },
      { window: 0 }, { window: -1 }, { window: Float::INFINITY }
    ].each do |options|
      assert_raises(ArgumentError, options.inspect) { Weft::RetryBudget.new(**options) }
    end
    Weft::RetryBudget.new(ratio: 0)
    Weft::RetryBudget.new(ratio: 1)
  end
end
