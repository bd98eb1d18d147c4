# frozen_string_literal: true

require_relative "../test_helper"
require "open3"

# The parser's libFuzzer harnesses (fuzz/run, owned by the parser) run briefly on every test
# run for the two targets the server feeds: request heads and chunked bodies. Long runs:
# `fuzz/run 600`.
class ServerFuzzTest < Minitest::Test
  ROOT = File.expand_path("../..", __dir__)

  # fuzz/run finds the compiler (CC, clang, or a versioned clang-NN as Debian's clang-14 package
  # installs it) and says, with --check, whether it can link a harness: skipped only where it
  # cannot, with the reason (no clang, or no libFuzzer runtime: libclang-rt-NN-dev).
  def test_request_and_chunked_harnesses_run_clean_for_5_seconds_each
    check, checked = Open3.capture2e(File.join(ROOT, "fuzz/run"), "--check", chdir: ROOT)
    skip "the fuzz harness cannot be built here: #{check.strip}" unless checked.success?
    output, status = Open3.capture2e(File.join(ROOT, "fuzz/run"), "5", "request", "chunked", chdir: ROOT)
    assert status.success?, "fuzz/run failed:\n#{output}"
    executions = output.scan(/(\d+) execs/).flatten.map(&:to_i)
    assert_equal 2, executions.size, output
    executions.each { |count| assert_operator count, :>, 1000, output }
    puts "\n#{output.lines.grep(/ok:|==/).join}" if ENV["VERBOSE"]
  end
end
