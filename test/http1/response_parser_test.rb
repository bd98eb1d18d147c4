# frozen_string_literal: true

require_relative "../test_helper"
require "weft/http1/parser"

class HTTP1ResponseParserTest < Minitest::Test
  ParseError = Weft::HTTP1::ParseError

  def parse(str, **opts)
    pr = Weft::HTTP1::ResponseParser.new(**opts)
    [pr.parse(str.b), pr]
  end

  def parse_bytewise(str, **opts)
    pr = Weft::HTTP1::ResponseParser.new(**opts)
    buf = +"".b
    str.b.each_byte do |byte|
      buf << byte
      n = pr.parse(buf)
      return [n, pr] if n
    end
    [nil, pr]
  end

  def assert_reject(str, **opts)
    e = assert_raises(ParseError) { parse(str, **opts) }
    assert_equal 502, e.status, e.message
    assert_raises(ParseError) { parse_bytewise(str, **opts) }
    e
  end

  def res(lines, start = "HTTP/1.1 200 OK")
    "#{start}\r\n#{lines.map { |l| "#{l}\r\n" }.join}\r\n"
  end

  def test_basic
    s = res(["Content-Type: text/plain", "Content-Length: 5", "X-Dup: a", "x-dup: b"])
    n, pr = parse(s + "hello")
    assert_equal s.bytesize, n
    assert_equal 200, pr.status
    assert_equal "OK", pr.reason
    assert_equal 1, pr.http_minor
    assert_equal [%w[Content-Type text/plain], %w[Content-Length 5], %w[X-Dup a], %w[x-dup b]], pr.headers
    assert_equal 5, pr.content_length
    refute pr.chunked?
    assert pr.keep_alive?
  end

  def test_bytewise_equals_whole
    s = res(["Transfer-Encoding: chunked", "Connection: close", "Set-Cookie: a=1"], "HTTP/1.1 404 Not  Found")
    a = parse(s)
    b = parse_bytewise(s)
    assert_equal a[0], b[0]
    %i[status reason headers chunked? keep_alive? http_minor].each do |m|
      assert_equal a[1].public_send(m), b[1].public_send(m)
    end
    assert_equal "Not  Found", a[1].reason
  end

  def test_incomplete
    pr = Weft::HTTP1::ResponseParser.new
    assert_nil pr.parse("HTTP/1.1 200 OK\r\nA: b\r\n".b)
    assert_equal 25, pr.parse("HTTP/1.1 200 OK\r\nA: b\r\n\r\n".b)
  end

  def test_empty_reason_and_missing_space
    assert_equal "", parse(res([], "HTTP/1.1 204 "))[1].reason
    _, pr = parse(res([], "HTTP/1.1 204"))
    assert_equal 204, pr.status
    assert_equal "", pr.reason
    assert_equal "", parse("HTTP/1.1 200\n\n")[1].reason
  end

  def test_keep_alive
    refute parse(res(["Connection: close"]))[1].keep_alive?
    refute parse(res([], "HTTP/1.0 200 OK"))[1].keep_alive?
    assert parse(res(["Connection: Keep-Alive"], "HTTP/1.0 200 OK"))[1].keep_alive?
  end

  def test_transfer_encoding
    assert parse(res(["Transfer-Encoding: gzip, chunked"]))[1].chunked?
    _, pr = parse(res(["Transfer-Encoding: gzip"]))
    refute pr.chunked?
    refute pr.keep_alive?, "close-delimited body"
    assert_nil pr.content_length
  end

  def test_rejects
    assert_reject res([], "HTTP/2.0 200 OK")
    assert_reject res([], "HTTP/1.1 20 OK")
    assert_reject res([], "HTTP/1.1 2000 OK")
    assert_reject res([], "HTTP/1.1 099 OK")
    assert_reject res([], "HTTP/1.1 600 OK")
    assert_reject res([], "HTTP/1.1  200 OK")
    assert_reject res([], "HTTP/1.1 200 O\x00K")
    assert_reject res([], "ICY 200 OK")
    assert_reject res(["Content-Length: 5", "Content-Length: 6"])
    assert_reject res(["Content-Length: -5"])
    assert_reject res(["Content-Length: abc"])
    assert_reject res(["Content-Length: 5", "Transfer-Encoding: chunked"])
    assert_reject res(["Transfer-Encoding: chunked"], "HTTP/1.0 200 OK")
    assert_reject res(["Transfer-Encoding: chunked, gzip"])
    assert_reject res(["Bad Name: x"])
    assert_reject res(["X: a\rb"])
    assert_reject "HTTP/1.1 200 OK\r\nX: a\r\n folded\r\n\r\n"
    assert_reject "HTTP/1.1 200 OK\rX: a\r\n\r\n"
  end

  def test_duplicate_identical_content_length_ok
    assert_equal 5, parse(res(["Content-Length: 5", "Content-Length: 5"]))[1].content_length
  end

  def test_limits
    assert_reject res((1..101).map { |i| "X-#{i}: y" })
    assert_reject res(["X: #{"a" * 70_000}"])
    assert_reject res(["X: #{"a" * 100}"]), max_header_bytes: 64
    pr = Weft::HTTP1::ResponseParser.new(max_header_bytes: 100)
    assert_raises(ParseError) { pr.parse("HTTP/1.1 200 OK\r\nX: #{"a" * 200}".b) }
  end

  def test_results_survive_buffer_mutation_and_reuse
    buf = res(["A: 1"]).b + res(["B: 2"], "HTTP/1.1 304 Not Modified").b
    pr = Weft::HTTP1::ResponseParser.new
    n = pr.parse(buf)
    headers = pr.headers
    buf.slice!(0, n)
    assert_equal [%w[A 1]], headers
    assert_equal res(["A: 1"]).bytesize, n
    assert pr.parse(buf)
    assert_equal 304, pr.status
    assert_equal [%w[B 2]], pr.headers
  end
end
