# frozen_string_literal: true

require_relative "../test_helper"
require "weft/server"

# ResponseWriter.write hands the common response to C (HTTP1.simple_response) and everything
# else to Ruby (#write_any). Here both run on the same responses: wherever C takes one, the
# bytes and the keep-alive verdict must be the ones Ruby produces; and C must decline whatever
# Ruby interprets, rejects or frames differently.
class ServerResponseWriterTest < Minitest::Test
  Writer = Weft::Server::ResponseWriter

  # Collects what the writer sends.
  class Recorder
    # The server's own date line, which the clock may move between the two writes compared.
    SERVER_DATE = /^date: \w{3}, \d\d \w{3} \d{4} \d\d:\d\d:\d\d GMT\r\n/.freeze

    def initialize(stopping: false)
      @bytes = +"".b
      @stopping = stopping
    end

    def server_stopping?
      @stopping
    end

    def write(data)
      @bytes << data.b
    end

    # @return [String] what was written, the server's date line made constant
    def bytes
      @bytes.sub(SERVER_DATE, "date: (the clock)\r\n")
    end
  end

  GET = { "REQUEST_METHOD" => "GET", "SERVER_PROTOCOL" => "HTTP/1.1" }.freeze

  # [what, status, headers, body, env overrides, whether C takes it]
  CASES = [
    ["plain", 200, { "content-type" => "text/plain" }, ["Hello World"], {}, true],
    ["no headers, empty body", 200, {}, [], {}, true],
    ["several parts", 201, { "content-type" => "text/html", "x-id" => "7" }, ["a", "bc", ""], {}, true],
    ["the app's own date", 200, { "Date" => "Tue, 01 Jan 2030 00:00:00 GMT" }, ["x"], {}, true],
    ["Rack 2 capitalized name", 404, { "Content-Type" => "text/plain" }, ["missing"], {}, true],
    ["unknown status", 599, {}, ["odd"], {}, true],
    ["HTTP/1.0 keep-alive", 200, {}, ["x"], { "SERVER_PROTOCOL" => "HTTP/1.0" }, true],
    ["content-length given", 200, { "content-length" => "1" }, ["x"], {}, false],
    ["connection: close", 200, { "connection" => "close" }, ["x"], {}, false],
    ["keep-alive header", 200, { "keep-alive" => "timeout=5" }, ["x"], {}, false],
    ["transfer-encoding", 200, { "transfer-encoding" => "chunked" }, ["1\r\nx\r\n0\r\n\r\n"], {}, false],
    ["rack.* header", 200, { "rack.something" => "1" }, ["x"], {}, false],
    ["Array value", 200, { "set-cookie" => %w[a=1 b=2] }, ["x"], {}, false],
    ["Rack 2 joined value", 200, { "set-cookie" => "a=1\nb=2" }, ["x"], {}, false],
    ["Integer value", 200, { "x-count" => 3 }, ["x"], {}, false],
    ["Symbol name", 200, { "x-sym": "v" }, ["x"], {}, false],
    ["invalid name", 200, { "bad name" => "v" }, ["x"], {}, false],
    ["CR in a value", 200, { "x-evil" => "a\rb" }, ["x"], {}, false],
    ["NUL in a value", 200, { "x-evil" => "a\0b" }, ["x"], {}, false],
    ["non-String part", 200, {}, ["a", :b], {}, false],
    ["large body", 200, {}, ["x" * 70_000], {}, false],
    ["HEAD", 200, { "content-type" => "text/plain" }, ["x"], { "REQUEST_METHOD" => "HEAD" }, false],
    ["204", 204, {}, [], {}, false],
    ["304", 304, { "etag" => "\"1\"" }, [], {}, false],
    ["String status", "200", {}, ["x"], {}, false],
    ["each body", 200, {}, Struct.new(:parts) { def each(&block) = parts.each(&block) }.new(["x"]), {}, false]
  ].freeze

  def test_c_and_ruby_write_the_same_bytes
    CASES.each do |what, status, headers, body, env, c_takes_it|
      [true, false].each do |keep_alive|
        [false, true].each do |stopping|
          request = GET.merge(env)
          fast = Recorder.new(stopping: stopping)
          ruby = Recorder.new(stopping: stopping)
          fast_result = outcome { Writer.write(fast, request, status, headers.dup, body, keep_alive) }
          ruby_result = outcome { Writer.write_any(ruby, request, status, headers.dup, body, keep_alive) }
          label = "#{what} (keep_alive=#{keep_alive}, stopping=#{stopping})"
          assert_equal ruby_result, fast_result, label
          assert_equal ruby.bytes, fast.bytes, label
        end
      end
      # HEAD, bodyless statuses and non-Integer statuses never reach C (ResponseWriter.write
      # decides); for the rest, C itself must accept or decline.
      next if !status.is_a?(Integer) || [204, 304].include?(status) || env["REQUEST_METHOD"] == "HEAD"
      taken = !Weft::HTTP1.simple_response("HTTP/1.1 200 OK\r\n", headers, body, nil, "date: x\r\n").nil?
      assert_equal c_takes_it, taken, "#{what}: C #{c_takes_it ? 'should' : 'should not'} take it"
    end
  end

  # Random headers and bodies (names and values from a small alphabet that includes the bytes
  # that matter: separators, CR, LF, NUL, high bytes, upper case, interpreted names): wherever C
  # takes one, Ruby writes the same bytes. This is the harness that fuzzes the C function
  # (its inputs are Ruby objects, so it runs in Ruby; fuzz/asan_ruby runs it under ASan).
  def test_random_responses_agree
    random = Random.new(Integer(ENV.fetch("SEED", 1234)))
    names = ["content-type", "Content-Type", "x-a", "date", "Date", "connection", "content-length", "rack.x",
             "keep-alive", "transfer-encoding", "set-cookie", "bad name", "x:y", "", "x\u00e9"]
    value_bytes = ["a", " ", ";", "=", "\r", "\n", "\0", "\xff".b, "1", "close", "chunked"]
    taken = 0
    2000.times do |i|
      headers = {}
      random.rand(0..4).times do
        value = Array.new(random.rand(0..6)) { value_bytes.sample(random: random) }.join
        headers[names.sample(random: random)] = random.rand(8).zero? ? [value] : value
      end
      body = Array.new(random.rand(0..3)) { "x" * random.rand(0..30_000) }
      keep_alive = random.rand(2).zero?
      status = [200, 201, 404, 500].sample(random: random)
      fast = Recorder.new
      ruby = Recorder.new
      fast_result = outcome { Writer.write(fast, GET, status, headers, body, keep_alive) }
      ruby_result = outcome { Writer.write_any(ruby, GET, status, headers, body, keep_alive) }
      assert_equal ruby_result, fast_result, "case #{i}: #{headers.inspect}"
      assert_equal ruby.bytes, fast.bytes, "case #{i}: #{headers.inspect}"
      taken += 1 if Weft::HTTP1.simple_response("HTTP/1.1 200 OK\r\n", headers, body, nil, "date: x\r\n")
    end
    assert_operator taken, :>, 100, "C should take a fair share of the random responses"
  end

  def test_c_output
    response = Weft::HTTP1.simple_response("HTTP/1.1 200 OK\r\n", { "content-type" => "text/plain" }, %w[Hello World],
                                           "connection: close\r\n", "date: now\r\n")
    assert_equal "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ndate: now\r\ncontent-length: 10\r\n" \
                 "connection: close\r\n\r\nHelloWorld", response
    assert_equal Encoding::BINARY, response.encoding
  end

  private

  # @return [Array] what #write returned, or the class of what it raised
  def outcome
    [:returned, yield]
  rescue StandardError => e
    [:raised, e.class]
  end
end
