# frozen_string_literal: true

require_relative "../test_helper"
require "open3"

# The parser's libFuzzer harnesses (fuzz/run, owned by the parser) run briefly on every test
# run for the two targets the server feeds: request heads and chunked bodies. Long runs:
# `fuzz/run 600`.
class ServerFuzzTest < Minitest::Test
  ROOT = File.expand_path("../..", __dir__)

  def test_request_and_chunked_harnesses_run_clean_for_5_seconds_each
    skip "clang is not installed: the fuzz harness needs clang and libclang-rt-14-dev" unless system("command -v clang > /dev/null 2>&1")
    output, status = Open3.capture2e(File.join(ROOT, "fuzz/run"), "5", "request", "chunked", chdir: ROOT)
    assert status.success?, "fuzz/run failed:\n#{output}"
    executions = output.scan(/(\d+) execs/).flatten.map(&:to_i)
    assert_equal 2, executions.size, output
    executions.each { |count| assert_operator count, :>, 1000, output }
    puts "\n#{output.lines.grep(/ok:|==/).join}" if ENV["VERBOSE"]
  end
end
