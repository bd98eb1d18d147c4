# frozen_string_literal: true

require_relative "../test_helper"
require_relative "support"
require "weft/http"

# The adaptive in-flight limit (Weft::Pool::AdaptiveLimit, the client's `adaptive: true`) against
# real upstreams: one that serves a few requests at once and queues the rest, where more
# connections only lengthen its queue, and ones that serve everything at once, however slow,
# which must not be held back.
class HTTPAdaptiveLimitTest < Minitest::Test
  include Weft::Test::HTTPFixtures

  # An upstream in a process of its own (threads of the test's process would share its lock
  # with the client, and its 100 ms time slices would be the latency): it serves `capacity`
  # requests at once (0: all), each for the seconds its path says (GET /0.05), like a server
  # with that many workers, and queues the rest. Each answer says how many requests it held,
  # serving or queued, when that one came in (x-held).
  UPSTREAM = <<~'RUBY'
    require "socket"
    capacity = Integer(ARGV[0])
    slots = Thread::Queue.new
    capacity.times { slots << true }
    lock = Thread::Mutex.new
    held = 0
    server = TCPServer.new("127.0.0.1", 0)
    server.listen(1024)
    $stdout.puts server.addr[1]
    $stdout.flush
    loop do
      Thread.new(server.accept) do |client|
        while (line = client.gets)
          nil until client.gets == "\r\n" # the rest of the head; GETs have no body
          now = lock.synchronize { held += 1 }
          slot = slots.pop if capacity.positive?
          sleep Float(line.split[1].delete_prefix("/"))
          slots << slot if capacity.positive?
          lock.synchronize { held -= 1 }
          client.write("HTTP/1.1 200 OK\r\nx-held: #{now}\r\ncontent-length: 2\r\n\r\nok")
        end
      rescue IOError, SystemCallError
        nil
      ensure
        client.close
      end
    end
  RUBY

  def teardown
    if @upstream
      Process.kill(:KILL, @upstream.pid)
      @upstream.close
    end
    super
  end

  # @return [String] the URL of an upstream (UPSTREAM) serving `capacity` at once (0: all)
  def upstream(capacity)
    @upstream = IO.popen([RbConfig.ruby, "-e", UPSTREAM, capacity.to_s])
    "http://127.0.0.1:#{Integer(@upstream.gets)}"
  end

  # Sends bursts of `size` concurrent GETs, one Weft.run each, each taking `service.call`
  # seconds at the upstream.
  # @return [Array<Array(Integer, Integer)>] per burst, the most requests the upstream held at
  #   once and the in-flight limit after it
  def bursts(http, count, size, service)
    Array.new(count) do
      peak = Weft.run { Weft.map(1..size) { Integer(http.get("/#{service.call}")["x-held"]) }.max }
      [peak, http.statistics.values.first[:in_flight_limit]]
    end
  end

  # Two workers, 10 ms a request: at most 200 answers a second whatever is sent. With a fixed
  # limit every burst of 64 puts all 64 into its queue (the pool grows to `limit` for requests
  # that wait); the adaptive limit keeps its mean latency within TOLERANCE times its fastest
  # answer.
  def test_a_saturated_upstream_is_not_sent_more_than_it_serves
    url = upstream(2)
    http = client(url, limit: 64, max_connecting: 4, adaptive: true)
    bursts = bursts(http, 6, 64, -> { 0.01 })
    assert_operator bursts.last(2).map(&:first).max, :<=, 40,
                    "requests the upstream held at once, and the limit, per burst: #{bursts}"
  end

  # 40-80 ms a request, all served at once: latency that varies but does not grow with the
  # requests in flight. The limit stays whole. (How many connections a burst uses is the
  # growth rule's business: it may share fewer than 64.)
  def test_an_upstream_that_serves_in_parallel_is_not_held_back
    url = upstream(0)
    http = client(url, limit: 64, max_connecting: 4, adaptive: true)
    bursts = bursts(http, 6, 64, -> { (0.04 + (rand * 0.04)).round(3) })
    assert_equal [64] * 6, bursts.map(&:last), "requests the upstream held at once, and the limit, per burst: #{bursts}"
    assert_operator bursts.last(2).map(&:first).max, :>=, 40, bursts.inspect
  end

  # The same upstream becomes five times slower (a slow query of its own): the mean latency
  # rises past TOLERANCE times the fastest answer, and the cuts tried do not bring it down. The
  # limit comes back.
  def test_an_upstream_that_slows_down_but_serves_in_parallel_gets_its_limit_back
    url = upstream(0)
    http = client(url, limit: 64, max_connecting: 4, adaptive: true)
    bursts(http, 4, 64, -> { 0.02 })
    bursts = bursts(http, 10, 64, -> { 0.1 })
    assert_operator bursts.map(&:last).min, :<, 64, "no cut was tried: #{bursts}"
    assert_equal [64, 64], bursts.last(2).map(&:last),
                 "requests the upstream held at once, and the limit, per burst: #{bursts}"
    assert_operator bursts.last(2).map(&:first).max, :>=, 40, bursts.inspect
  end
end
