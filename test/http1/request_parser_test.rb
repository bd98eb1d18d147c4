# frozen_string_literal: true

require_relative "../test_helper"
require "weft/http1/parser"

class HTTP1RequestParserTest < Minitest::Test
  ParseError = Weft::HTTP1::ParseError

  def parser(**opts)
    Weft::HTTP1::RequestParser.new(**opts)
  end

  def parse(str, **opts)
    pr = parser(**opts)
    env = {}
    n = pr.parse(str.b, env)
    [n, env, pr]
  end

  # Feeds the buffer one byte at a time (buffer grows, as a server's would).
  def parse_bytewise(str, **opts)
    pr = parser(**opts)
    env = {}
    buf = +"".b
    str.b.each_byte do |byte|
      buf << byte
      n = pr.parse(buf, env)
      return [n, env, pr] if n
    end
    [nil, env, pr]
  end

  def assert_reject(str, status, **opts)
    e = assert_raises(ParseError) { parse(str, **opts) }
    assert_equal status, e.status, "whole: #{str.inspect} -> #{e.message}"
    e2 = assert_raises(ParseError) { parse_bytewise(str, **opts) }
    assert_equal status, e2.status, "bytewise: #{str.inspect} -> #{e2.message}"
    e
  end

  def req(head_lines, start = "GET / HTTP/1.1")
    "#{start}\r\n#{head_lines.map { |l| "#{l}\r\n" }.join}\r\n"
  end

  BROWSER = "GET /search?q=weft&lang=en HTTP/1.1\r\n" \
            "Host: www.example.com\r\n" \
            "User-Agent: Mozilla/5.0 (X11; Linux x86_64; rv:120.0) Gecko/20100101 Firefox/120.0\r\n" \
            "Accept: text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8\r\n" \
            "Accept-Language: en-US,en;q=0.5\r\n" \
            "Accept-Encoding: gzip, deflate, br\r\n" \
            "Connection: keep-alive\r\n" \
            "Cookie: session=abc123\r\n" \
            "Upgrade-Insecure-Requests: 1\r\n" \
            "Sec-Fetch-Dest: document\r\n" \
            "X-Custom-Thing: \tvalue with spaces \t\r\n" \
            "\r\n"

  # ---- accepted input --------------------------------------------------------

  def test_browser_request
    n, env, pr = parse(BROWSER + "NEXT")
    assert_equal BROWSER.bytesize, n
    assert_equal "GET", env["REQUEST_METHOD"]
    assert_equal "/search", env["PATH_INFO"]
    assert_equal "q=weft&lang=en", env["QUERY_STRING"]
    assert_equal "HTTP/1.1", env["SERVER_PROTOCOL"]
    assert_equal "www.example.com", env["HTTP_HOST"]
    assert_equal "gzip, deflate, br", env["HTTP_ACCEPT_ENCODING"]
    assert_equal "session=abc123", env["HTTP_COOKIE"]
    assert_equal "1", env["HTTP_UPGRADE_INSECURE_REQUESTS"]
    assert_equal "value with spaces", env["HTTP_X_CUSTOM_THING"], "OWS trimmed on both sides"
    assert_nil pr.content_length
    refute pr.chunked?
    assert pr.keep_alive?
    refute pr.expect_continue?
    refute pr.upgrade?
    assert_equal 1, pr.http_minor
    assert pr.finished?
  end

  def test_bytewise_equals_whole
    [BROWSER,
     req(["Host: a", "Content-Length: 12", "Content-Type: text/plain"], "POST /x HTTP/1.1"),
     req(["Host: a", "Transfer-Encoding: chunked"], "PUT /u?a HTTP/1.1"),
     "\r\n\r\nGET / HTTP/1.0\n\n",
     req([], "OPTIONS * HTTP/1.0")].each do |s|
      whole = parse(s)
      bytewise = parse_bytewise(s)
      assert_equal whole[0], bytewise[0]
      assert_equal whole[1], bytewise[1]
      %i[content_length chunked? keep_alive? http_minor].each do |m|
        expected = whole[2].public_send(m)
        actual = bytewise[2].public_send(m)
        expected.nil? ? assert_nil(actual, m) : assert_equal(expected, actual, m)
      end
    end
  end

  def test_server_env_keeps_existing_keys
    base = { "rack.version" => [3, 0], "SERVER_NAME" => "localhost", "SERVER_PORT" => "80",
             "rack.url_scheme" => "http", "SCRIPT_NAME" => "", "REMOTE_ADDR" => "127.0.0.1",
             "rack.input" => nil, "rack.errors" => $stderr, "rack.multithread" => false }
    [0, 5, 60].each do |extra|
      env = base.dup
      lines = ["Host: h"] + (1..extra).map { |i| "X-Extra-#{i}: #{i}" }
      assert parser.parse(req(lines).b, env)
      base.each { |k, v| assert_same v, env[k], k }
      assert_equal "h", env["HTTP_HOST"]
      assert_equal extra.to_s, env["HTTP_X_EXTRA_#{extra}"] if extra.positive?
      assert_equal base.size + 5 + extra, env.size
      assert env.keys.all?(&:frozen?)
    end
  end

  # A server keeps a parser per connection: between messages it must not hold its field-line
  # array (max_headers entries), only while a head is being parsed.
  def test_field_array_is_held_only_while_a_head_is_parsed
    require "objspace"
    parser = Weft::HTTP1::RequestParser.new(max_headers: 100)
    idle = ObjectSpace.memsize_of(parser)
    assert_operator idle, :<, 1000
    assert_nil parser.parse("GET / HTTP/1.1\r\nHost: x\r\n".b, {})
    assert_operator ObjectSpace.memsize_of(parser), :>=, idle + 100 * 16, "mid-head"
    assert parser.parse("GET / HTTP/1.1\r\nHost: x\r\nA: 1\r\n\r\n".b, env = {})
    assert_equal "1", env["HTTP_A"]
    assert_equal idle, ObjectSpace.memsize_of(parser), "complete"
    assert_raises(Weft::HTTP1::ParseError) { parser.parse("BAD\r\n\r\n".b, {}) }
    assert_equal idle, ObjectSpace.memsize_of(parser), "failed"
    assert parser.parse("GET /again HTTP/1.1\r\nHost: y\r\n\r\n".b, env = {}), "usable after both"
    assert_equal ["/again", "y"], env.values_at("PATH_INFO", "HTTP_HOST")
  end

  def test_incomplete_returns_nil
    pr = parser
    env = {}
    assert_nil pr.parse("GET / HTTP/1.1\r\nHost: a\r\n".b, env)
    assert_empty env
    assert_nil pr.parse("GET / HTTP/1.1\r\nHost: a\r\n\r".b, env)
    assert_equal 27, pr.parse("GET / HTTP/1.1\r\nHost: a\r\n\r\n".b, env)
  end

  def test_rack_keys
    _, env, pr = parse(req(["Host: h", "Content-Type: text/plain", "Content-Length: 5"], "POST /p HTTP/1.1"))
    assert_equal "text/plain", env["CONTENT_TYPE"]
    assert_equal "5", env["CONTENT_LENGTH"]
    refute env.key?("HTTP_CONTENT_TYPE")
    refute env.key?("HTTP_CONTENT_LENGTH")
    assert_equal 5, pr.content_length
    assert_equal "", parse(req(["Host: h"], "GET /p HTTP/1.1"))[1]["QUERY_STRING"]
    assert_equal "", parse(req(["Host: h"], "GET /p? HTTP/1.1"))[1]["QUERY_STRING"]
    # one frozen string for every request without a query: no object per request
    assert_same parse(req(["Host: h"], "GET /a HTTP/1.1"))[1]["QUERY_STRING"],
                parse(req(["Host: h"], "GET /b? HTTP/1.1"))[1]["QUERY_STRING"]
    assert_predicate parse(req(["Host: h"], "GET /p HTTP/1.1"))[1]["QUERY_STRING"], :frozen?
  end

  def test_path_not_decoded
    _, env, = parse(req(["Host: h"], "GET /a%20b/%2F?x=%41 HTTP/1.1"))
    assert_equal "/a%20b/%2F", env["PATH_INFO"]
    assert_equal "x=%41", env["QUERY_STRING"]
  end

  def test_unknown_method_token
    _, env, = parse(req(["Host: h"], "M-SEARCH / HTTP/1.1"))
    assert_equal "M-SEARCH", env["REQUEST_METHOD"]
  end

  def test_header_name_case_and_dashes
    _, env, = parse(req(["Host: h", "x-lower-CASE: 1", "X-Forwarded-For: 1.2.3.4"]))
    assert_equal "1", env["HTTP_X_LOWER_CASE"]
    assert_equal "1.2.3.4", env["HTTP_X_FORWARDED_FOR"]
  end

  def test_underscore_names_dropped
    _, env, = parse(req(["Host: h", "X_Forwarded_For: evil", "X-Forwarded-For: good"]))
    assert_equal "good", env["HTTP_X_FORWARDED_FOR"]
  end

  def test_repeated_headers_joined
    _, env, = parse(req(["Host: h", "Accept: a", "X-A: 1", "accept: b", "Cookie: a=1", "X-A: 2", "cookie: b=2"]))
    assert_equal "a, b", env["HTTP_ACCEPT"]
    assert_equal "1, 2", env["HTTP_X_A"]
    assert_equal "a=1; b=2", env["HTTP_COOKIE"]
  end

  def test_empty_value
    _, env, = parse(req(["Host: h", "X-Empty:", "X-Blank:   "]))
    assert_equal "", env["HTTP_X_EMPTY"]
    assert_equal "", env["HTTP_X_BLANK"]
  end

  def test_obs_text_in_value
    _, env, = parse(req(["Host: h", "X-Latin: caf\xE9"]))
    assert_equal "caf\xE9".b, env["HTTP_X_LATIN"]
  end

  def test_absolute_form
    _, env, = parse(req(["Host: ignored"], "GET http://example.org:8080/a/b?c=d HTTP/1.1"))
    assert_equal "/a/b", env["PATH_INFO"]
    assert_equal "c=d", env["QUERY_STRING"]
    assert_equal "example.org:8080", env["HTTP_HOST"], "authority wins over Host (RFC 9112 3.2.2)"
    _, env, = parse(req([], "GET HTTPS://example.org HTTP/1.0"))
    assert_equal "/", env["PATH_INFO"]
    assert_equal "example.org", env["HTTP_HOST"]
    _, env, = parse(req([], "GET http://example.org?x HTTP/1.0"))
    assert_equal "/", env["PATH_INFO"]
    assert_equal "x", env["QUERY_STRING"]
  end

  def test_absolute_form_rejects
    assert_reject req(["Host: h"], "GET http:///x HTTP/1.1"), 400
    assert_reject req(["Host: h"], "GET http://user@h/x HTTP/1.1"), 400
    assert_reject req(["Host: h"], "GET ftp://h/x HTTP/1.1"), 400
    assert_reject req(["Host: h"], "GET x/y HTTP/1.1"), 400
  end

  def test_asterisk_form
    _, env, = parse(req(["Host: h"], "OPTIONS * HTTP/1.1"))
    assert_equal "*", env["PATH_INFO"]
    assert_reject req(["Host: h"], "GET * HTTP/1.1"), 400
  end

  def test_connect_not_supported
    assert_reject req(["Host: h:443"], "CONNECT h:443 HTTP/1.1"), 501
  end

  def test_leading_empty_lines_skipped
    n, env, = parse("\r\n\r\n" + req(["Host: h"]))
    assert_equal 4 + req(["Host: h"]).bytesize, n
    assert_equal "/", env["PATH_INFO"]
    assert_reject ("\r\n" * 5000) + req(["Host: h"]), 400
  end

  def test_bare_lf_accepted
    n, env, pr = parse("GET /lf HTTP/1.1\nHost: h\nX-A: 1\n\n")
    assert_equal 33, n
    assert_equal "1", env["HTTP_X_A"]
    assert pr.keep_alive?
  end

  def test_keep_alive_rules
    assert parse(req(["Host: h"]))[2].keep_alive?
    refute parse(req(["Host: h", "Connection: close"]))[2].keep_alive?
    refute parse(req(["Host: h", "Connection: Keep-Alive, CLOSE"]))[2].keep_alive?
    refute parse(req(["Host: h", "Connection: foo", "Connection: close"]))[2].keep_alive?
    refute parse(req([], "GET / HTTP/1.0"))[2].keep_alive?
    assert parse(req(["Connection: keep-alive"], "GET / HTTP/1.0"))[2].keep_alive?
    assert parse(req(["Connection: x ,  Keep-Alive"], "GET / HTTP/1.0"))[2].keep_alive?
    refute parse(req(["Connection: keep-alived"], "GET / HTTP/1.0"))[2].keep_alive?
    assert_equal 0, parse(req([], "GET / HTTP/1.0"))[2].http_minor
  end

  def test_expect_continue
    assert parse(req(["Host: h", "Expect: 100-Continue"], "POST / HTTP/1.1"))[2].expect_continue?
    refute parse(req(["Host: h", "Expect: 200-ok"], "POST / HTTP/1.1"))[2].expect_continue?
    refute parse(req(["Expect: 100-continue"], "POST / HTTP/1.0"))[2].expect_continue?, "ignored for HTTP/1.0"
  end

  def test_upgrade
    assert parse(req(["Host: h", "Connection: keep-alive, Upgrade", "Upgrade: websocket"]))[2].upgrade?
    refute parse(req(["Host: h", "Upgrade: websocket"]))[2].upgrade?
    refute parse(req(["Host: h", "Connection: upgrade"]))[2].upgrade?
  end

  def test_chunked
    pr = parse(req(["Host: h", "Transfer-Encoding: chunked"], "POST / HTTP/1.1"))[2]
    assert pr.chunked?
    assert_nil pr.content_length
    assert parse(req(["Host: h", "Transfer-Encoding: CHUNKED"], "POST / HTTP/1.1"))[2].chunked?
  end

  def test_content_length_forms
    assert_equal 0, parse(req(["Host: h", "Content-Length: 0"]))[2].content_length
    assert_equal 7, parse(req(["Host: h", "Content-Length: 007"]))[2].content_length
    assert_equal 5, parse(req(["Host: h", "Content-Length: 5", "Content-Length: 5"]))[2].content_length
    assert_equal 5, parse(req(["Host: h", "Content-Length: 5,5 , 5"]))[2].content_length
    assert_equal 2**63 - 1, parse(req(["Host: h", "Content-Length: #{2**63 - 1}"]))[2].content_length
  end

  # Repeated fields are found by comparing names pairwise; names of one length that differ only
  # at their end made each comparison walk the whole name: 99 names of 600 bytes took ~9 ms to
  # parse, 100 times a head of the same size with short names (a client could keep a core busy
  # with 6.5 MB/s of such heads). Measured against that head in the same run, so load on the
  # machine cancels out.
  def test_same_length_field_names_do_not_make_the_parse_quadratic_in_their_length
    base = "GET / HTTP/1.1\r\nHost: x\r\n"
    hostile = base + (0...99).map { |i| "X-#{'a' * 600}#{format('%02d', i)}: v\r\n" }.join + "\r\n"
    plain = base + (0...99).map { |i| "X-#{i}: #{'v' * 600}\r\n" }.join + "\r\n"
    assert_in_delta hostile.bytesize, plain.bytesize, 1000
    _, env, = parse(hostile)
    assert_equal 100, env.count { |key, _| key.start_with?("HTTP_") }
    time = lambda do |head|
      pr = parser
      buffer = head.b
      best = Float::INFINITY
      3.times do
        started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
        20.times { pr.parse(buffer, {}) }
        best = [best, Process.clock_gettime(Process::CLOCK_MONOTONIC) - started].min
      end
      best
    end
    ratio = time.(hostile) / time.(plain)
    assert_operator ratio, :<, 10, "hostile head parsed #{ratio.round(1)} times slower than a plain one"

    # Long names are still joined when repeated (any case), and told apart when they differ
    # past the compared prefix.
    _, env, = parse(req(["Host: h", "X-Forwarded-Client-Cert-A: 1", "x-forwarded-client-cert-b: 2", "X-FORWARDED-CLIENT-CERT-A: 3"]))
    assert_equal "1, 3", env["HTTP_X_FORWARDED_CLIENT_CERT_A"]
    assert_equal "2", env["HTTP_X_FORWARDED_CLIENT_CERT_B"]
  end

  # CONTENT_LENGTH is the length in its plain decimal form, as for a list ("5, 5" gives "5"):
  # leading zeros are valid HTTP (1*DIGIT), but Ruby's Integer() reads "010" as octal 8, so an app
  # that parses it that way would frame a 10-byte body as 8.
  def test_content_length_in_env_has_no_leading_zeros
    {"010" => "10", "007" => "7", "0" => "0", "000" => "0", "00, 0" => "0", "10, 010" => "10"}.each do |sent, env_value|
      assert_equal env_value, parse(req(["Host: h", "Content-Length: #{sent}"]))[1]["CONTENT_LENGTH"], sent
    end
  end

  def test_pipelined
    a = req(["Host: h", "Content-Length: 3"], "POST /one HTTP/1.1") + "abc"
    b = req(["Host: h"], "GET /two HTTP/1.1")
    buf = (a + b).b
    pr = parser
    env = {}
    n = pr.parse(buf, env)
    assert_equal "/one", env["PATH_INFO"]
    assert_equal 3, pr.content_length
    rest = buf.byteslice(n + pr.content_length..)
    env2 = {}
    # parse resets itself after a complete head
    assert_equal b.bytesize, pr.parse(rest, env2)
    assert_equal "/two", env2["PATH_INFO"]
    assert_nil pr.content_length
  end

  def test_explicit_reset
    pr = parser
    assert_nil pr.parse("GET /a HTTP/1.1\r\n".b, {})
    pr.reset
    env = {}
    assert pr.parse(req(["Host: h"], "GET /b HTTP/1.1").b, env)
    assert_equal "/b", env["PATH_INFO"]
  end

  def test_accessors_before_completion_raise
    assert_raises(RuntimeError) { parser.keep_alive? }
  end

  # ---- rejected input --------------------------------------------------------

  def test_method_must_be_token
    assert_reject req(["Host: h"], "G(T / HTTP/1.1"), 400
    assert_reject req(["Host: h"], " / HTTP/1.1"), 400
    assert_reject "GET\t/ HTTP/1.1\r\nHost: h\r\n\r\n", 400
  end

  def test_target_characters
    assert_reject req(["Host: h"], "GET /a\x01b HTTP/1.1"), 400
    assert_reject req(["Host: h"], "GET /a\x7Fb HTTP/1.1"), 400
    assert_reject req(["Host: h"], "GET /caf\xE9 HTTP/1.1"), 400
    assert_reject req(["Host: h"], "GET /a#frag HTTP/1.1"), 400
    assert_reject req(["Host: h"], "GET  / HTTP/1.1"), 400
    assert_reject req(["Host: h"], "GET / x HTTP/1.1"), 400
  end

  def test_versions
    assert_reject req(["Host: h"], "GET / HTTP/2.0"), 505
    assert_reject req(["Host: h"], "GET / HTTP/1.2"), 505
    assert_reject req(["Host: h"], "GET / HTTP/0.9"), 505
    assert_reject req(["Host: h"], "GET / HTTP/1.10"), 400
    assert_reject req(["Host: h"], "GET / http/1.1"), 400
    assert_reject req(["Host: h"], "GET / HTTP/1"), 400
    assert_reject req(["Host: h"], "GET / HTTP/1.1 "), 400
    assert_reject "GET /\r\n\r\n", 400
  end

  def test_request_line_too_long
    assert_reject req(["Host: h"], "GET /#{"a" * 9000} HTTP/1.1"), 414
    assert_reject req(["Host: h"], "GET /#{"a" * 100} HTTP/1.1"), 414, max_request_line: 64
    # fails early: no blank line has arrived yet
    e = assert_raises(ParseError) { parser(max_request_line: 64).parse("GET /#{"a" * 100}".b, {}) }
    assert_equal 414, e.status
    assert parse(req(["Host: h"], "GET /#{"a" * 50} HTTP/1.1"), max_request_line: 64)[0]
  end

  def test_field_name_rules
    assert_reject req(["Host: h", "X-A : 1"]), 400
    assert_reject req(["Host: h", ": 1"]), 400
    assert_reject req(["Host: h", "X(A): 1"]), 400
    assert_reject req(["Host: h", "X-A"]), 400
    assert_reject req(["Host: h", "X\xC3A: 1"]), 400
  end

  def test_field_value_ctls
    assert_reject req(["Host: h", "X-A: a\x00b"]), 400
    assert_reject req(["Host: h", "X-A: a\x7Fb"]), 400
    assert_reject req(["Host: h", "X-A: a\x1Bb"]), 400
    assert_reject req(["Host: h", "X-A: a\rb"]), 400
    assert_reject "GET / HTTP/1.1\r\nHost: h\r\nX-A: a\r\r\n\r\n", 400
  end

  def test_bare_cr_line_endings
    assert_reject "GET / HTTP/1.1\rHost: h\r\n\r\n", 400
    assert_reject "GET / HTTP/1.1\r\nHost: h\r\r\n", 400
    assert_reject "GET / HTTP/1.1\r\nHost: h\r\n\rX", 400
    assert_reject "\rGET / HTTP/1.1\r\nHost: h\r\n\r\n", 400
  end

  def test_obs_fold
    assert_reject "GET / HTTP/1.1\r\nHost: h\r\nX-A: 1\r\n 2\r\n\r\n", 400
    assert_reject "GET / HTTP/1.1\r\nHost: h\r\nX-A: 1\r\n\t2\r\n\r\n", 400
    assert_reject "GET / HTTP/1.1\r\n Host: h\r\n\r\n", 400
  end

  def test_header_limits
    many = (1..101).map { |i| "X-H#{i}: v" }
    assert_reject req(["Host: h"] + many), 431
    assert parse(req(["Host: h"] + many.first(99)))[0]
    assert_reject req(["Host: h", "X-A: 1", "X-B: 2"]), 431, max_headers: 2
    assert_reject req(["Host: h", "X-Big: #{"v" * 70_000}"]), 431
    assert_reject req(["Host: h", "X-Big: #{"v" * 200}"]), 431, max_header_bytes: 128
  end

  def test_slowloris_fails_early
    pr = parser(max_header_bytes: 1024)
    buf = +"GET / HTTP/1.1\r\nHost: h\r\nX-Slow: ".b
    assert_nil pr.parse(buf, {})
    e = assert_raises(ParseError) do
      2000.times do
        buf << "a"
        pr.parse(buf, {})
      end
    end
    assert_equal 431, e.status
    assert_operator buf.bytesize, :<, 1100
    # many small headers without the blank line
    pr = parser
    buf = +"GET / HTTP/1.1\r\nHost: h\r\n".b
    e = assert_raises(ParseError) do
      200.times { |i| buf << "X-#{i}: 1\r\n"; pr.parse(buf, {}) }
    end
    assert_equal 431, e.status
  end

  def test_invalid_bytes_fail_before_head_completes
    e = assert_raises(ParseError) { parser.parse("GET / HTTP/1.1\r\nHost: h\r\nX-A: \x00".b, {}) }
    assert_equal 400, e.status
  end

  def test_content_length_rejects
    assert_reject req(["Host: h", "Content-Length: -1"]), 400
    assert_reject req(["Host: h", "Content-Length: +1"]), 400
    assert_reject req(["Host: h", "Content-Length: 1.0"]), 400
    assert_reject req(["Host: h", "Content-Length: 0x10"]), 400
    assert_reject req(["Host: h", "Content-Length:"]), 400
    assert_reject req(["Host: h", "Content-Length: 1 2"]), 400
    assert_reject req(["Host: h", "Content-Length: 5", "Content-Length: 6"]), 400
    assert_reject req(["Host: h", "Content-Length: 5, 6"]), 400
    assert_reject req(["Host: h", "Content-Length: 5,"]), 400
    assert_reject req(["Host: h", "Content-Length: #{2**63}"]), 400
    assert_reject req(["Host: h", "Content-Length: 99999999999999999999999"]), 400
  end

  def test_transfer_encoding_rejects
    assert_reject req(["Host: h", "Transfer-Encoding: chunked", "Content-Length: 5"]), 400
    assert_reject req(["Host: h", "Content-Length: 5", "Transfer-Encoding: chunked"]), 400
    assert_reject req(["Host: h", "Transfer-Encoding: gzip"]), 400
    assert_reject req(["Host: h", "Transfer-Encoding: chunked, gzip"]), 400
    assert_reject req(["Host: h", "Transfer-Encoding: chunked, chunked"]), 400
    assert_reject req(["Host: h", "Transfer-Encoding: chunked", "Transfer-Encoding: chunked"]), 400
    assert_reject req(["Host: h", "Transfer-Encoding: chunked;x=1"]), 400
    assert_reject req(["Host: h", "Transfer-Encoding:"]), 400
    assert_reject req(["Host: h", "Transfer-Encoding: \"chunked\""]), 400
    assert_reject req(["Transfer-Encoding: chunked"], "POST / HTTP/1.0"), 400
    assert_reject req(["Host: h", "Transfer-Encoding: gzip, chunked"]), 501
  end

  def test_transfer_encoding_split_across_lines
    assert parse(req(["Host: h", "Transfer-Encoding: ", "Transfer-Encoding: chunked"]))[2].chunked?
    # "identity" was removed by RFC 9112: just another unsupported coding
    assert_reject req(["Host: h", "Transfer-Encoding: identity", "Transfer-Encoding: chunked"]), 501
    assert_reject req(["Host: h", "Transfer-Encoding: chunked", "Transfer-Encoding: gzip"]), 400
  end

  def test_host_rules
    assert_reject req([]), 400
    assert_reject req(["Host: a", "Host: b"]), 400
    assert_reject req(["Host: a", "host: a"]), 400
    assert_reject req(["Host: a b"]), 400
    assert_reject req(["Host: a/b"]), 400
    assert_reject req(["Host: a@b"]), 400
    _, env, = parse(req(["Host: [::1]:8080"]))
    assert_equal "[::1]:8080", env["HTTP_HOST"]
    assert parse(req(["Host:"]))[0], "empty Host is valid"
    assert parse(req([], "GET / HTTP/1.0"))[0], "HTTP/1.0 needs no Host"
  end

  def test_errors_have_messages_and_status
    e = assert_reject(req(["Host: h", "Content-Length: x"]), 400)
    assert_kind_of StandardError, e
    assert_match(/Content-Length/, e.message)
  end

  def test_non_string_and_bad_args
    assert_raises(TypeError) { parser.parse(nil, {}) }
    assert_raises(TypeError) { parser.parse("x", nil) }
    assert_raises(ArgumentError) { parser(max_headers: 0) }
  end
end
