# frozen_string_literal: true

require_relative "../test_helper"
require_relative "support/server_helpers"
require "logger"
require "stringio"

# Error floods: an error logged in full once, its repeats counted and summed up in one line.
class ServerErrorLogTest < Minitest::Test
  include Weft::Test::ServerHelpers

  SUMMARY = /repeated (\d+) times? in the last ([\d.]+)s/

  # 1,000 failing requests: one backtrace, then summary lines that add up to the 999 repeats.
  # Before, each request logged its backtrace (30 MB in 5 s under load).
  def test_a_thousand_failing_requests_log_one_backtrace_and_a_count
    app = ->(env) { raise ArgumentError, "boom on #{env['PATH_INFO']}" }
    log = capture_log do
      with_server(app, error_summary_interval: 0.3) do |_, port|
        sockets = Array.new(4) { connect(port) }
        250.times do |round|
          sockets.each_with_index { |socket, index| socket.write("GET /item/#{round * 4 + index} HTTP/1.1\r\nHost: x\r\n\r\n") }
          sockets.each { |socket| assert_equal 500, read_response(socket).status }
        end
        sockets.each(&:close)
      end
    end
    assert_equal 1, log.scan(/ArgumentError: boom on \/item\/\d+\n\t/).size, "one full report"
    assert_equal 1, log.scan(/error_log_test\.rb:\d+/).size, "one backtrace:\n#{log[0, 2000]}"
    summaries = log.scan(SUMMARY)
    refute_empty summaries
    assert_equal 999, summaries.sum { |count, _| count.to_i }, log
    assert_operator log.lines.size, :<, 60, "a small log:\n#{log}"
    assert_operator log.bytesize, :<, 20_000
  end

  def test_distinct_errors_are_each_logged_in_full_and_counted_apart
    log = StringIO.new
    errors = Weft::Server::ErrorLog.new(60, logger: Logger.new(log))
    3.times { errors.report("GET /a", raised(KeyError, "a")) }
    2.times { errors.report("GET /b", raised(IndexError, "b")) }
    errors.report("GET /c", raised_elsewhere) # same class as /a, raised elsewhere
    assert_equal 3, log.string.scan(/GET \/[abc]: \w+: \w+\n\t/).size, "three full reports"
    errors.stop # logs what is still counted
    summaries = log.string.scan(/GET \/(\w): (\w+): \w+ \(repeated (\d+) times?/)
    assert_equal [%w[a KeyError 2], %w[b IndexError 1]], summaries
  end

  def test_an_error_quiet_for_a_whole_interval_is_logged_in_full_again
    log = StringIO.new
    errors = Weft::Server::ErrorLog.new(0.1, logger: Logger.new(log))
    errors.report("GET /a", raised(KeyError, "a"))
    sleep 0.15
    errors.flush # nothing repeated: forgotten
    errors.report("GET /a", raised(KeyError, "a"))
    assert_equal 2, log.string.scan(/KeyError: a\n\t/).size
    refute_match SUMMARY, log.string
  end

  private

  def raised(klass, message)
    raise klass, message
  rescue klass => e
    e
  end

  def raised_elsewhere
    raise KeyError, "c"
  rescue KeyError => e
    e
  end
end
