# frozen_string_literal: true

require_relative "../test_helper"
require_relative "support/server_helpers"
require "net/http"

# request_deadline: each request's app call runs under Weft.deadline.
class ServerRequestDeadlineTest < Minitest::Test
  include Weft::Test::ServerHelpers

  APP = lambda do |env|
    case env["PATH_INFO"]
    when "/slow" then sleep 5
    when "/fan-out" then Weft.gather(Array.new(3) { Weft.spawn { sleep 5 } })
    when "/remaining" then return [200, { "content-type" => "text/plain" }, [format("%.3f", Weft.remaining || -1)]]
    end
    [200, { "content-type" => "text/plain" }, ["done"]]
  end

  def test_a_request_past_its_deadline_gets_503_in_time_and_the_connection_serves_on
    log = capture_log do
      with_server(APP, request_deadline: 0.2) do |_server, port|
        Net::HTTP.start("127.0.0.1", port) do |http|
          response = assert_elapsed_under(0.2 + 0.4) { http.get("/slow") }
          assert_equal "503", response.code
          assert_equal "request deadline exceeded\n", response.body
          response = assert_elapsed_under(0.2 + 0.4) { http.get("/fan-out") } # tasks it spawned, too
          assert_equal "503", response.code
          assert_equal "done", http.get("/fast").body # same keep-alive connection
        end
      end
    end
    assert_equal 2, log.scan("deadline of 0.2s exceeded; answered 503").size, log
  end

  def test_the_app_sees_what_is_left
    with_server(APP, request_deadline: 2) do |_server, port|
      left = http_get(port, "/remaining").body.to_f
      assert_operator left, :>, 1.5
      assert_operator left, :<=, 2
    end
    with_server(APP) do |_server, port|
      assert_equal "-1.000", http_get(port, "/remaining").body # no deadline unless configured
    end
  end

  def test_invalid_values_are_refused
    [0, -1, Float::INFINITY, "2"].each do |bad|
      assert_raises(ArgumentError, bad.inspect) { Weft::Server::Config.new(request_deadline: bad) }
    end
  end
end
