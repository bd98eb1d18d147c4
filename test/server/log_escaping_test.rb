# frozen_string_literal: true

require_relative "../test_helper"
require_relative "support/server_helpers"

# What a client sends must not be able to forge or break a line of the access log or of the
# error log: a `"` ends the quoted request field of the Common Log Format, a line break starts a
# new line, and control bytes reach whoever reads the log in a terminal.
class ServerLogEscapingTest < Minitest::Test
  include Weft::Test::ServerHelpers

  # The request target may hold `"` and `\` (visible ASCII; the parser refuses control bytes):
  # unescaped, `GET /a" 200 - 0.0001\n...` closed the request field early.
  def test_a_quote_in_the_target_does_not_end_the_access_logs_request_field
    log = StringIO.new
    with_server(->(_env) { [200, {}, []] }, access_log: log) do |_, port|
      response, socket = raw_request(port, "GET /x\"\\y?q=\"z HTTP/1.1\r\nHost: x\r\n\r\n")
      assert_equal 200, response.status
      socket.close
    end
    line = log.string
    assert_equal 1, line.count("\n")
    assert_match(%r{\A127\.0\.0\.1 - - \[.+\] "GET /x\\x22\\x5Cy\?q=\\x22z HTTP/1\.1" 200 - \d+\.\d{4}\n\z}, line)
  end

  # An app (a router, a middleware that unescapes) may leave any bytes in PATH_INFO, which is
  # what both logs name the request by: line breaks and control bytes are escaped, not written.
  def test_bytes_an_app_left_in_path_info_are_escaped_in_both_logs
    log = StringIO.new
    errors = StringIO.new
    forged = "/a\n127.0.0.1 - - [01/Jan/2026:00:00:00 +0000] \"GET /admin HTTP/1.1\" 200 - 0.0001\e[2J\xFF".b
    app = lambda do |env|
      env["PATH_INFO"] = forged
      raise "boom" if env["QUERY_STRING"] == "fail"
      [200, {}, []]
    end
    original = Weft.logger
    Weft.logger = Logger.new(errors)
    begin
      with_server(app, lint: false, access_log: log) do |_, port|
        http_get(port, "/")
        assert_equal "500", http_get(port, "/?fail").code
      end
    ensure
      Weft.logger = original
    end
    lines = log.string.lines
    assert_equal 2, lines.size, log.string
    assert_includes lines.first, "\"GET /a\\x0A127.0.0.1 - - [01/Jan/2026:00:00:00 +0000] \\x22GET /admin HTTP/1.1\\x22 200 - 0.0001\\x1B[2J\\xFF HTTP/1.1\" 200"
    message = errors.string
    assert_includes message, "GET /a\\x0A127.0.0.1"
    refute_includes message, "\e"
    refute_includes message, "/a\n"
  end

  # A PATH_INFO and a query past ASCII in different encodings (both the app's doing) do not
  # join as they are: the line is still written, from their bytes, escaped.
  def test_fields_in_different_encodings_are_logged_as_bytes
    log = StringIO.new
    app = lambda do |env|
      env["PATH_INFO"] = "/caf\xC3\xA9".b
      env["QUERY_STRING"] = "q=\u00e9\u00e9"
      [200, {}, []]
    end
    with_server(app, lint: false, access_log: log) do |_, port|
      assert_equal "200", http_get(port, "/").code
    end
    assert_includes log.string, "\"GET /caf\\xC3\\xA9?q=\\xC3\\xA9\\xC3\\xA9 HTTP/1.1\" 200"
  end
end
