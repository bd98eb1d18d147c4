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
  # An error's message may quote what a client sent (a record's id, a parameter): its line
  # breaks become tab-indented continuation lines, like the backtrace's, and its control bytes
  # are escaped, so that no line of it passes for a log entry of its own. Unescaped, the forged
  # line below began a line of the log and the escape sequence reached the terminal.
  def test_an_error_message_cannot_forge_an_error_log_line
    errors = StringIO.new
    app = ->(env) { raise ArgumentError, "no user #{URI.decode_www_form_component(env['QUERY_STRING'])}" }
    forged = "x\r\nE, [2026-01-01T00:00:00] ERROR -- : admin logged in\e[2J\u009b"
    with_error_log(errors) do
      with_server(app, lint: false) do |_, port|
        assert_equal "500", http_get(port, "/?#{URI.encode_www_form_component(forged).gsub('+', '%20')}").code
      end
    end
    assert_message_escaped(errors.string)
  end

  # The same for the one-line warning of a request whose deadline passed (503), which names
  # the request by its PATH_INFO (the app's to change) and quotes the error's message.
  def test_a_deadline_warning_escapes_the_path_and_the_message
    errors = StringIO.new
    app = lambda do |env|
      env["PATH_INFO"] = "/a\nE, forged"
      raise Weft::DeadlineExceeded, "gave up\nE, forged too\e[2J"
    end
    with_error_log(errors) do
      with_server(app, lint: false) { |_, port| assert_equal "503", http_get(port, "/").code }
    end
    log = errors.string
    assert_includes log, "GET /a\\x0AE, forged: gave up\n\tE, forged too\\x1B[2J; answered 503"
    refute(log.lines.any? { |line| line.start_with?("E, forged") }, log)
    refute_includes log, "\e"
  end

  # Rack says a status is an Integer; a String the response writer could read as one
  # ("200\n") was written into the access log as it was, line break and all.
  def test_a_status_string_cannot_break_the_access_log_line
    log = StringIO.new
    with_server(->(_env) { ["200\n", {}, []] }, lint: false, access_log: log) do |_, port|
      assert_equal "200", http_get(port, "/").code
    end
    assert_equal 1, log.string.count("\n"), log.string
    assert_includes log.string, "HTTP/1.1\" 200\\x0A - "
  end

  # Each kind of text escape_message meets: plain text is returned as it is (no copy), readable
  # UTF-8 is kept, bytes that are not text in their encoding are escaped one by one.
  def test_escape_message_keeps_text_and_escapes_what_is_not
    escape = Weft::Server::LogText.method(:escape_message)
    plain = "undefined method `total' for nil"
    assert_same plain, escape.call(plain)
    assert_equal "café\n\tzwei", escape.call("café\r\nzwei")
    assert_equal "bad \\xFF\\x1B byte", escape.call("bad \xFF\e byte".dup.force_encoding(Encoding::UTF_8))
    assert_equal "latin \\xE9", escape.call("latin \xE9".dup.force_encoding(Encoding::ISO_8859_1))
    assert_equal "", escape.call(nil)
  end

  private

  def with_error_log(io)
    original = Weft.logger
    Weft.logger = Logger.new(io)
    yield
  ensure
    Weft.logger = original
  end

  # Every line of the log but the entries' first starts with a tab (a continuation), and no
  # control byte but the line breaks and tabs is left.
  def assert_message_escaped(log)
    entries = log.lines.reject { |line| line.start_with?("\t") }
    assert(entries.all? { |line| line.match?(/\A[A-Z], \[/) }, log)
    refute_match(/[\x00-\x08\x0B-\x1F\x7F]/, log)
    refute_includes log, "\u009b"
  end
end
