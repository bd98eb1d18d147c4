# frozen_string_literal: true

require_relative "../test_helper"
require_relative "support/server_helpers"

# partial_head_budget: the bytes of unfinished request heads a process keeps parked. Past it,
# the oldest large partial heads are answered 431 and closed; small ones (what real clients'
# heads are, when one spans packets at all) go last.
class ServerPartialHeadsTest < Minitest::Test
  include Weft::Test::ServerHelpers

  HELLO = ->(_env) { [200, { "content-type" => "text/plain" }, ["ok"]] }

  def test_past_the_budget_the_oldest_large_partial_heads_are_dropped_with_431
    with_server(HELLO, partial_head_budget: 100_000, header_timeout: 10) do |server, port|
      small = connect(port)
      small.write("GET / HTTP/1.1\r\nHost: x\r\n") # 25 bytes, parked first
      wait_for { server.partial_heads.size == 1 }
      big = Array.new(4) do |index|
        socket = connect(port)
        socket.write("GET / HTTP/1.1\r\nHost: x\r\nX-Pad: #{'p' * 30_000}") # ~30 KB each
        wait_for { server.partial_heads.size == index + 2 } if index < 3 # the 4th takes one out
        socket
      end
      # 4 x 30 KB is over 100,000: the oldest big one went, the small one stays.
      assert_elapsed_under(3) do
        response = read_response(big.first)
        assert_equal 431, response.status
        assert_equal "", big.first.read, "a clean end of stream after the 431"
      end
      heads = server.partial_heads
      assert_equal 4, heads.size
      assert_operator heads.bytes, :<=, 100_000
      big.drop(1).each { |socket| refute socket.wait_readable(0.05), "only the oldest big head was dropped" }

      # The survivors finish their heads and are answered.
      small.write("\r\n")
      assert_equal "ok", read_response(small).body
      finish_heads(heads, big.drop(1), "\r\n\r\n")
    end
  end

  # A head that is dropped or closed while parked stops counting; one that completes too.
  def test_closed_partial_heads_stop_counting
    with_server(HELLO, partial_head_budget: 1_000_000) do |server, port|
      sockets = Array.new(3) do
        socket = connect(port)
        socket.write("GET / HTTP/1.1\r\nHost: x\r\nX-Pad: #{'p' * 10_000}")
        socket
      end
      heads = server.partial_heads
      wait_for { heads.size == 3 }
      assert_operator heads.bytes, :>, 30_000
      sockets.each(&:close)
      wait_for { heads.size.zero? }
      assert_equal 0, heads.bytes
    end
  end

  # A partial head left behind a complete request in the same read is a tail of that read's
  # buffer: parked as it was, it kept the whole buffer (the big head before it) alive while the
  # budget counted its 29 bytes (2,000 such connections: 115 MB of Strings held, 60 KB
  # counted, bench/server/partial_head_flood.rb). Parked, it holds no more than the budget counts.
  def test_a_partial_head_parked_behind_a_big_one_holds_only_what_the_budget_counts
    require "objspace"
    connections = 8
    tail = "GET / HTTP/1.1\r\nHost: x\r\nX-Pa" # more than a String holds embedded
    with_server(HELLO, partial_head_budget: 10_000_000, header_timeout: 10) do |server, port|
      heads = server.partial_heads
      GC.start
      strings_before = ObjectSpace.memsize_of_all(String)
      sockets = Array.new(connections) { connect(port) }
      sockets.each do |socket|
        socket.write("GET / HTTP/1.1\r\nHost: x\r\nX-Pad: #{'p' * 60_000}\r\n\r\n#{tail}")
        assert_equal "ok", read_response(socket).body
      end
      wait_for(10) { heads.size == connections } # answered before parked: a loaded machine may lag
      GC.start
      held = ObjectSpace.memsize_of_all(String) - strings_before
      counted = heads.bytes
      # 8 heads of 60 KB kept alive would be 480 KB; their 29-byte tails are a few hundred
      # bytes. The margin is for strings of the test's own (none of them 60 KB each).
      assert_operator counted, :>=, connections * tail.bytesize
      assert_operator held, :<, counted + 200_000, "strings grew by #{held} bytes, the budget counts #{counted}"
      finish_heads(heads, sockets, "d: 1\r\n\r\n")
    end
  end

  private

  # Sends each of `sockets` the `rest` of its head, checks that it is answered, and that no
  # partial head is left counting.
  def finish_heads(heads, sockets, rest)
    sockets.each do |socket|
      socket.write(rest)
      assert_equal "ok", read_response(socket).body
    end
    wait_for { heads.size.zero? }
    assert_equal 0, heads.bytes
  end

  def wait_for(seconds = 3)
    deadline = Weft::Timers.now + seconds
    sleep 0.005 until yield || Weft::Timers.now > deadline
    assert yield, "not within #{seconds} s"
  end
end
