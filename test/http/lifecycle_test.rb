# frozen_string_literal: true

require_relative "../test_helper"
require_relative "support"
require "weft/http"
require "stringio"

# What happens to connections when requests are cancelled, time out from outside, wait for
# the pool, or cross a fork.
class HTTPClientLifecycleTest < Minitest::Test
  include Weft::Test::HTTPFixtures

  def test_a_cancelled_request_releases_and_closes_its_connection
    srv = server { |r| sleep(r.path == "/slow" ? 2 : 0); [200, {}, "ok"] }
    http = client(srv.url, limit: 1)
    assert_elapsed_under(1.5) do
      Weft.run do
        task = Weft.spawn { http.get("/slow") }
        sleep 0.1
        task.cancel
        assert_nil task.wait
        assert_equal "ok", http.get("/fast").body # the only slot is free again
      end
    end
    stats = http.statistics.fetch(srv.url)
    assert_equal 1, stats[:discarded]
    assert_equal 2, srv.connections
  end

  def test_an_outer_timeout_is_not_swallowed_and_the_connection_is_dropped
    srv = server { sleep 1; [200, {}, "late"] }
    http = client(srv.url)
    assert_elapsed_under(1) do
      Weft.run { assert_raises(Weft::TimeoutError) { Weft.timeout(0.2) { http.get("/") } } }
    end
    assert_equal 0, http.statistics.fetch(srv.url)[:size]
  end

  def test_the_deadline_bounds_the_wait_for_a_pooled_connection
    srv = server { sleep 1; [200, {}, "ok"] }
    http = client(srv.url, limit: 1)
    Weft.run do
      busy = Weft.spawn { http.get("/") }
      assert_elapsed_under(0.6) do
        assert_raises(Weft::HTTP::DeadlineExceeded) { http.get("/", deadline: 0.2) }
      end
      busy.wait
    end
  end

  def test_a_forked_child_opens_its_own_connections
    srv = server { |r| [200, {}, "pid #{r.path}"] }
    http = client(srv.url)
    http.get("/parent")
    reader, writer = IO.pipe
    pid = fork do
      reader.close
      writer.write(http.get("/child").body)
      writer.close
      exit!(0)
    end
    writer.close
    Process.wait(pid)
    assert_equal "pid /child", reader.read
    assert_equal "pid /parent", http.get("/parent").body
    assert_equal 2, srv.connections
  end

  def test_a_retried_request_replays_an_io_body
    bodies = Queue.new
    srv = server(raw: true) do |socket, id|
      request = socket.readpartial(65_536)
      if id == 2 # the replayed PUT: head, then the 7-byte body
        request << socket.readpartial(65_536) until request.split("\r\n\r\n", 2)[1].to_s.bytesize >= 7
        bodies << request
      end
      socket.write("HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
      socket.readpartial(65_536)
      if id == 1
        socket.close
      else
        socket.write("HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
        sleep 0.2
      end
    end
    http = client(srv.url)
    http.get("/")
    io = StringIO.new("prefix-payload")
    io.read(7) # the body starts where the IO stands
    assert_equal "ok", http.put("/", body: io).body
    assert_equal 2, srv.connections
    replayed = bodies.pop
    assert_match(/\APUT /, replayed)
    assert replayed.end_with?("\r\n\r\npayload"), replayed.inspect
  end

  def test_requests_after_close_are_refused
    srv = server { [200, {}, "ok"] }
    http = client(srv.url)
    http.get("/")
    http.close
    assert_raises(Weft::Error) { http.get("/") }
  end
end
