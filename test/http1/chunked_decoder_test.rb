# frozen_string_literal: true

require_relative "../test_helper"
require "weft/http1/parser"

class HTTP1ChunkedDecoderTest < Minitest::Test
  ParseError = Weft::HTTP1::ParseError

  def decode(str, **opts)
    d = Weft::HTTP1::ChunkedDecoder.new(**opts)
    input = str.b
    out = +"".b
    done = d.decode(input, out)
    [done, out, input]
  end

  def decode_bytewise(str, **opts)
    d = Weft::HTTP1::ChunkedDecoder.new(**opts)
    input = +"".b
    out = +"".b
    str.b.each_byte do |byte|
      input << byte
      return [true, out, input] if d.decode(input, out)
      assert_empty input, "decoder keeps no unconsumed bytes"
    end
    [false, out, input]
  end

  def assert_reject(str, status = 400, **opts)
    e = assert_raises(ParseError) { decode(str, **opts) }
    assert_equal status, e.status, e.message
    e2 = assert_raises(ParseError) { decode_bytewise(str, **opts) }
    assert_equal status, e2.status
  end

  BODY = "5\r\nhello\r\n7;name=val;x\r\n, world\r\nA\r\n0123456789\r\n0\r\nX-Trailer: t\r\n\r\n"

  def test_decode
    done, out, rest = decode(BODY + "NEXT")
    assert done
    assert_equal "hello, world0123456789", out
    assert_equal "NEXT", rest, "bytes after the body are left in input"
  end

  def test_bytewise
    done, out, = decode_bytewise(BODY)
    assert done
    assert_equal "hello, world0123456789", out
  end

  def test_partial_and_resume
    d = Weft::HTTP1::ChunkedDecoder.new
    out = +"".b
    input = "a\r\n01234".b
    refute d.decode(input, out)
    assert_equal "01234", out
    assert_empty input
    input << "56789\r\n0\r\n"
    refute d.decode(input, out)
    refute d.done?
    input << "\r\n"
    assert d.decode(input, out)
    assert d.done?
    assert_equal "0123456789", out
    d.reset
    refute d.done?
  end

  def test_hex_case_and_leading_zeros
    assert_equal "x" * 26, decode("1A\r\n#{"x" * 26}\r\n001a\r\n#{"x" * 26}\r\n0\r\n\r\n")[1][0, 26]
    assert decode("0000\r\n\r\n")[0]
  end

  def test_empty_body
    done, out, = decode("0\r\n\r\n")
    assert done
    assert_empty out
  end

  def test_rejects
    assert_reject "g\r\nx\r\n0\r\n\r\n"
    assert_reject "\r\n"
    assert_reject "-1\r\n"
    assert_reject "+1\r\nx\r\n0\r\n\r\n"
    assert_reject "0x1\r\nx\r\n0\r\n\r\n"
    assert_reject "1 \r\nx\r\n0\r\n\r\n"
    assert_reject "1\nx\r\n0\r\n\r\n", 400
    assert_reject "1\rx\r\n0\r\n\r\n"
    assert_reject "3\r\nabcX\r\n0\r\n\r\n"
    assert_reject "3\r\nabc\rX0\r\n\r\n"
    assert_reject "3\r\nabc\n0\r\n\r\n"
    assert_reject "1;a\x00b\r\nx\r\n0\r\n\r\n"
    assert_reject "0\r\n\r\X"
    assert_reject "0\r\nTrailer: x\n\r\n"
    assert_reject "0\r\n Folded: x\r\n\r\n"
  end

  # A trailer line is a field line (RFC 9112 section 7.1.2: name, colon, value), held to the
  # head's rules: a line without a colon, or with whitespace before it (section 5.1: MUST be
  # rejected), is refused rather than skipped. Skipped, "0\r\nGET /x HTTP/1.1\r\n\r\n" hid a
  # request inside the trailer section, which a front end that ends the body at the last chunk
  # forwards as one of its own: front end and server then disagree on how many requests the
  # connection carried, and answers go to the wrong requests.
  def test_trailer_lines_are_field_lines
    assert_reject "0\r\nGET /x HTTP/1.1\r\n\r\n"
    assert_reject "0\r\nNoColon\r\n\r\n"
    assert_reject "0\r\nX-A : b\r\n\r\n"
    assert_reject "0\r\nX-A\t: b\r\n\r\n"
    assert_reject "0\r\n: b\r\n\r\n"
    assert_reject "0\r\nX(A): b\r\n\r\n"
    assert decode("0\r\nX-A:b\r\nX-B: c : d\r\nX-C:\r\n\r\n")[0]
  end

  def test_overflow
    assert_reject "#{"f" * 16}\r\n"
    assert_reject "8000000000000000\r\n"
    assert_reject "10000000000000000\r\n"
    d = Weft::HTTP1::ChunkedDecoder.new
    refute d.decode("7fffffffffffffff\r\nabc".b, +"".b), "largest 63-bit size is accepted"
  end

  def test_max_chunk_size
    assert_reject "11\r\n#{"x" * 17}\r\n0\r\n\r\n", 413, max_chunk_size: 16
    assert decode("10\r\n#{"x" * 16}\r\n0\r\n\r\n", max_chunk_size: 16)[0]
  end

  def test_max_body_size_refuses_a_chunk_at_its_size_line
    # Refused as soon as the size line ends: the data is never asked for.
    assert_reject "7fffffffffffffff\r\n", 413, max_body_size: 1 << 30
    assert_reject "8\r\n12345678\r\n9\r\n", 413, max_body_size: 16
    done, out, = decode("8\r\n12345678\r\n8\r\n12345678\r\n0\r\n\r\n", max_body_size: 16)
    assert done, "exactly the limit is fine"
    assert_equal 16, out.bytesize
    assert_reject "1\r\n", 413, max_body_size: 0
    assert decode("0\r\n\r\n", max_body_size: 0)[0]
    e = assert_raises(ParseError) { decode("7fffffffffffffff\r\n", max_body_size: 100) }
    assert_equal "chunked body too large", e.message
  end

  def test_max_body_size_survives_reset
    d = Weft::HTTP1::ChunkedDecoder.new(max_body_size: 4)
    assert d.decode("4\r\nabcd\r\n0\r\n\r\n".b, +"".b)
    d.reset
    assert d.decode("4\r\nabcd\r\n0\r\n\r\n".b, +"".b), "the count starts again after reset"
    d.reset
    assert_raises(ParseError) { d.decode("5\r\n".b, +"".b) }
  end

  def test_extension_bound
    assert_reject "1;#{"e" * 5000}\r\nx\r\n0\r\n\r\n"
    assert decode("1;#{"e" * 1000}\r\nx\r\n0\r\n\r\n")[0]
  end

  def test_trailer_bound
    assert_reject "0\r\nX: #{"t" * 20_000}\r\n\r\n"
    assert_reject "0\r\nX: #{"t" * 100}\r\n\r\n", max_trailer_bytes: 64
    assert decode("0\r\nX: #{"t" * 100}\r\nY: 2\r\n\r\n")[0]
  end

  def test_error_leaves_decoder_failed
    d = Weft::HTTP1::ChunkedDecoder.new
    assert_raises(ParseError) { d.decode("zz".b, +"".b) }
    assert_raises(ParseError) { d.decode("0\r\n\r\n".b, +"".b) }
  end

  def test_args
    assert_raises(ArgumentError) { Weft::HTTP1::ChunkedDecoder.new(max_chunk_size: 0) }
    assert_raises(ArgumentError) { Weft::HTTP1::ChunkedDecoder.new(max_body_size: -1) }
    s = "0\r\n\r\n".b
    assert_raises(ArgumentError) { Weft::HTTP1::ChunkedDecoder.new.decode(s, s) }
    assert_raises(FrozenError) { Weft::HTTP1::ChunkedDecoder.new.decode("0\r\n\r\n".b.freeze, +"") }
  end
end
