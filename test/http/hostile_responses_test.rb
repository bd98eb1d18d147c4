# frozen_string_literal: true

require_relative "../test_helper"
require_relative "support"
require "weft/http"
require "zlib"

# Whatever bytes a server sends, the client either returns a response or raises one of its
# own errors, promptly, and never pools the connection after an error.
class HTTPHostileResponsesTest < Minitest::Test
  BASES = [
    "HTTP/1.1 200 OK\r\ncontent-length: 11\r\ncontent-type: text/plain\r\n\r\nhello world",
    "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
    "HTTP/1.1 200 OK\r\ncontent-encoding: gzip\r\ncontent-length: #{Zlib.gzip('hello world').bytesize}\r\n\r\n" \
    "#{Zlib.gzip('hello world')}".b,
    "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n",
    "HTTP/1.0 200 OK\r\n\r\nuntil close"
  ].map(&:b).freeze

  def mutate(random, base)
    bytes = base.dup
    case random.rand(4)
    when 0 then bytes[0, random.rand(bytes.bytesize)]
    when 1
      3.times { bytes.setbyte(random.rand(bytes.bytesize), random.rand(256)) }
      bytes
    when 2 then bytes.insert(random.rand(bytes.bytesize), random.bytes(random.rand(1..20)))
    else bytes.sub("\r\n\r\n", "\r\nx-dup: 1\r\ncontent-length: 3\r\n\r\n")
    end
  end

  def test_mutated_responses_give_a_response_or_a_client_error
    random = Random.new(Integer(ENV.fetch("SEED", "4242")))
    replies = Queue.new
    server = Weft::Test::HTTPServer.new(raw: true) do |socket|
      socket.readpartial(65_536)
      socket.write(replies.pop)
    end
    client = Weft::HTTP::Client.new(server.url, proxy: nil, read_timeout: 1, max_uses: 1)
    outcomes = Hash.new(0)
    assert_elapsed_under(30) do
      200.times do
        reply = mutate(random, BASES.sample(random: random))
        replies << reply
        begin
          client.get("/").body
          outcomes[:ok] += 1
        rescue Weft::HTTP::Error => e
          outcomes[e.class] += 1
          assert_equal 0, client.statistics.fetch(server.url)[:idle], "#{e.class} left a pooled connection"
        rescue StandardError => e
          flunk "#{e.class}: #{e.message} for #{reply.inspect}\n#{e.backtrace.first(5).join("\n")}"
        end
      end
    end
    assert_operator outcomes[:ok], :>, 0
    assert_operator outcomes.size, :>, 2
  ensure
    client&.close
    server&.close
  end
end
