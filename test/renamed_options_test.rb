# frozen_string_literal: true

require_relative "test_helper"
require "weft/pool"
require "weft/renamed_options"
require "open3"
require "rbconfig"

# The pools' renamed options: the old names keep working, and each warns once per process,
# naming the new option and the caller's line.
class RenamedOptionsTest < Minitest::Test
  RENAMES = { old_name: :new_name }.freeze

  # Each test warns under an owner of its own: the once-per-process memory is global.
  def owner
    "RenamedOptionsTest##{name}"
  end

  def test_moves_old_names_to_new_ones_and_keeps_the_rest
    renamed = nil
    assert_output(nil, /#{Regexp.escape(owner)}: option old_name: is deprecated, use new_name: instead/) do
      renamed = Weft::RenamedOptions.rename(owner, { old_name: 1, other: 2 }, RENAMES)
    end
    assert_equal({ other: 2, new_name: 1 }, renamed)
  end

  def test_options_without_old_names_pass_through_untouched
    options = { new_name: 1 }
    assert_output(nil, "") { assert_same options, Weft::RenamedOptions.rename(owner, options, RENAMES) }
  end

  def test_warns_once_per_owner_and_name
    _, first = capture_io { Weft::RenamedOptions.rename(owner, { old_name: 1 }, RENAMES) }
    _, again = capture_io { Weft::RenamedOptions.rename(owner, { old_name: 2 }, RENAMES) }
    _, elsewhere = capture_io { Weft::RenamedOptions.rename("#{owner} (elsewhere)", { old_name: 3 }, RENAMES) }
    assert_match(/old_name/, first)
    assert_equal "", again
    assert_match(/elsewhere.*old_name/, elsewhere)
  end

  def test_the_warning_names_the_callers_line
    _, warning = capture_io { Weft::RenamedOptions.rename(owner, { old_name: 1 }, RENAMES) }
    assert_match(/\A#{Regexp.escape(__FILE__)}:#{__LINE__ - 1}: /, warning)
  end

  def test_silent_while_deprecation_warnings_are_off
    previous = Warning[:deprecated]
    Warning[:deprecated] = false
    assert_output(nil, "") { Weft::RenamedOptions.rename(owner, { old_name: 1 }, RENAMES) }
  ensure
    Warning[:deprecated] = previous
  end

  def test_both_names_at_once_is_an_error
    error = assert_raises(ArgumentError) { Weft::RenamedOptions.rename(owner, { old_name: 1, new_name: 2 }, RENAMES) }
    assert_match(/new_name: or its old name old_name:/, error.message)
  end

  def test_weft_pool_old_names_work
    pool = nil
    capture_io { pool = Weft::Pool.new(limit: 1, timeout: 0.05) { Object.new } }
    pool.checkout
    error = assert_raises(Weft::Pool::TimeoutError) { pool.checkout }
    assert_match(/within 0.05s/, error.message)
    capture_io { error = assert_raises(Weft::Pool::TimeoutError) { pool.checkout(timeout: 0.02) } }
    assert_match(/within 0.02s/, error.message)
    assert_raises(ArgumentError) { pool.checkout(acquire_timeout: 1, timeout: 0.02) }
  end

  # A fresh process, so that every warning is its first: each old name of each pool warns
  # exactly once however often it is used, and says what to write instead.
  def test_each_old_name_warns_once_per_process
    script = <<~RUBY
      require "weft"
      require "weft/http"
      require "weft/postgres"
      2.times do
        pool = Weft::Pool.new(limit: 1, timeout: 1) { Object.new }
        pool.with(timeout: 1) { }
        Weft::HTTP::Client.new("http://127.0.0.1:1", pool_timeout: 1, max_requests: 5)
        db = Weft::Postgres::Pool.new("postgres://127.0.0.1:1/x", size: 3, checkout_timeout: 1, max_lifetime: 60)
        raise "limit not applied" unless db.limit == 3 && db.statistics[:limit] == 3
      end
    RUBY
    lib = File.expand_path("../lib", __dir__)
    _, stderr, status = Open3.capture3(RbConfig.ruby, "-W:deprecated", "-I", lib, "-e", script)
    assert status.success?, stderr
    expected = {
      "Weft::Pool.new: option timeout:" => "acquire_timeout:",
      "Weft::Pool#checkout: option timeout:" => "acquire_timeout:",
      "Weft::HTTP::Client.new: option pool_timeout:" => "acquire_timeout:",
      "Weft::HTTP::Client.new: option max_requests:" => "max_uses:",
      "Weft::Postgres::Pool.new: option size:" => "limit:",
      "Weft::Postgres::Pool.new: option checkout_timeout:" => "acquire_timeout:",
      "Weft::Postgres::Pool.new: option max_lifetime:" => "max_age:"
    }
    lines = stderr.lines.grep(/is deprecated/)
    assert_equal expected.size, lines.size, stderr
    expected.each do |old, new|
      assert_equal 1, lines.count { |line| line.include?("#{old} is deprecated, use #{new} instead") }, "#{old}\n#{stderr}"
    end
    assert lines.all? { |line| line.start_with?("-e:") }, "warnings should name the caller's line:\n#{stderr}"
  end
end
