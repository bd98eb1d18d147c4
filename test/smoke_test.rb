# frozen_string_literal: true

require_relative "test_helper"
require "rbconfig"
require "tmpdir"
require "open3"

# The bundle loads, and the test infrastructure itself behaves.
class SmokeTest < Minitest::Test
  def test_bundle_loads
    require "io/event"
    require "pg"
    require "rack"
    assert defined?(IO::Event::Selector)
    version = PG.library_version
    puts "\nlibpq #{version / 10_000}.#{version % 10_000} (#{version}), pg gem #{PG::VERSION}, " \
         "io-event #{Gem.loaded_specs['io-event']&.version}, ruby #{RUBY_VERSION}"
    assert_operator version, :>=, 140_000, "pipeline mode needs libpq 14 or newer"
  end

  def test_assert_elapsed_under
    assert_equal :done, assert_elapsed_under(1) { :done }
    error = assert_raises(Minitest::Assertion) { assert_elapsed_under(0.01) { sleep 0.05 } }
    assert_match(/took 0\.0[5-9]\d*s|took 0\.\d+s/, error.message)
  end

  def test_free_tcp_port
    port = free_tcp_port
    assert_kind_of Integer, port
    TCPServer.new("127.0.0.1", port).close
  end

  # The watchdog, in child processes so this suite is not the one that times out.
  def test_watchdog_fails_a_slow_test_and_the_run_goes_on
    out, status = run_child_tests(<<~RUBY)
      def test_a_sleeps; sleep 30; end
      def test_b_queue; Thread::Queue.new.pop; end
      def test_c_fine; assert true; end
    RUBY
    refute status.success?
    assert_match(/3 runs, 1 assertions, 0 failures, 2 errors/, out)
    assert_match(/ran longer than 0\.5s/, out)
  end

  def test_watchdog_reaches_a_fiber_scheduler
    out, status = run_child_tests(<<~RUBY)
      require "async"
      def test_async_sleep; Async { |task| task.async { sleep 30 }.wait }; end
      def test_after; assert true; end
    RUBY
    refute status.success?
    assert_match(/2 runs, 1 assertions, 0 failures, 1 errors/, out)
  end

  def test_watchdog_aborts_a_test_that_ignores_it
    out, status = run_child_tests(<<~RUBY)
      def test_stuck
        loop { begin; sleep 30; rescue Exception; end }
      end
    RUBY
    assert_equal 1, status.exitstatus
    assert_match(/still running .* aborting the test process/, out)
    refute_match(/runs,/, out)
  end

  private

  def run_child_tests(body)
    Dir.mktmpdir("weft-watchdog") do |dir|
      file = File.join(dir, "child_test.rb")
      File.write(file, <<~RUBY)
        require "test_helper"
        class ChildTest < Minitest::Test
          #{body}
        end
      RUBY
      env = { "WEFT_TEST_TIMEOUT" => "0.5", "WEFT_TEST_WATCHDOG_GRACE" => "1" }
      root = File.expand_path("..", __dir__)
      cmd = [RbConfig.ruby, "-I#{root}/lib", "-I#{root}/test", file, "--seed", "1"]
      out, status = Open3.capture2e(env, *cmd)
      [out, status]
    end
  end
end
