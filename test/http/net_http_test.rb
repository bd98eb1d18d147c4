# frozen_string_literal: true

require_relative "../test_helper"
require_relative "support"
require "net/http"

# The docs say plain Net::HTTP stays correct and concurrent under Weft: check it.
class NetHTTPUnderWeftTest < Minitest::Test
  def test_net_http_calls_overlap_in_a_reactor
    server = Weft::Test::HTTPServer.new { |r| sleep 0.5; [200, {}, "net #{r.path}"] }
    uri = URI(server.url)
    bodies = assert_elapsed_under(2) do
      Weft.run do
        Weft.map(1..10) { |i| Net::HTTP.get(uri.host, "/#{i}", uri.port) }
      end
    end
    assert_equal (1..10).map { |i| "net /#{i}" }, bodies
  ensure
    server&.close
  end
end
