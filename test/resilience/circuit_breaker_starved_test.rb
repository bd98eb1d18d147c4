# frozen_string_literal: true

require_relative "../test_helper"
require "rbconfig"
require "weft/resilience"
require "weft/http"

# A breaker judges the dependency, not its caller: a call that ran out of time while the
# caller's reactor was not looking for the answer (a fiber kept the CPU, or the process waited
# for one) tells it nothing about the peer. The peer runs in a process of its own, so that a
# reactor kept busy here cannot hold it up (through the GVL, as a thread would be).
class CircuitBreakerStarvedTest < Minitest::Test
  DEADLINE = 0.05
  CALLS = 10
  # Milliseconds a healthy peer takes when the caller is not busy, and a slow peer: slower than
  # the busy fiber keeps the reactor, by far.
  PROMPT = 5
  SLOW = 400
  # How long a busy fiber keeps the reactor from looking at its sockets: three deadlines, so
  # that a peer process held up on a loaded machine still answers the held calls meanwhile.
  HOG = 0.15

  # GET /MS answers "ok" after MS milliseconds; GET /held/TOKEN as soon as the gate TOKEN is
  # open, which a line "TOKEN" on a connection to the second port opens. On keep-alive
  # connections, a thread per connection.
  PEER = <<~'RUBY'
    require "socket"
    server = TCPServer.new("127.0.0.1", 0)
    control = TCPServer.new("127.0.0.1", 0)
    $stdout.puts "#{server.addr[1]} #{control.addr[1]}"
    $stdout.flush
    lock = Mutex.new
    opened = ConditionVariable.new
    gates = {}
    Thread.new do
      loop do
        Thread.new(control.accept) do |socket|
          while (token = socket.gets&.chomp)
            lock.synchronize { gates[token] = true; opened.broadcast }
          end
        end
      end
    end
    loop do
      Thread.new(server.accept) do |client|
        while (line = client.gets)
          nil until (header = client.gets).nil? || header == "\r\n"
          if (token = line[%r{\AGET /held/(\w+)}, 1])
            lock.synchronize { opened.wait(lock) until gates[token] }
          else
            sleep(line[%r{\AGET /(\d+)}, 1].to_i / 1000.0)
          end
          client.write("HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
        end
      rescue IOError, SystemCallError
        nil
      ensure
        client.close
      end
    end
  RUBY

  def setup
    @peer = IO.popen([RbConfig.ruby, "-e", PEER])
    port, control = @peer.gets.split.map { |number| Integer(number) }
    @url = "http://127.0.0.1:#{port}"
    @gates = TCPSocket.new("127.0.0.1", control)
    @rounds = 0
  end

  def teardown
    @gates&.close
    Process.kill(:KILL, @peer.pid)
    @peer.close
  end

  def breaker(**options)
    defaults = { window_calls: CALLS, minimum_calls: CALLS / 2, open_for: 30, register: false }
    Weft::CircuitBreaker.new("starved-#{name}", **defaults, **options)
  end

  # Runs the block in a reactor with a client whose CALLS connections to the peer are open.
  def with_client
    client = Weft::HTTP::Client.new(@url)
    Weft.run do
      Array.new(CALLS) { Weft.spawn { client.get("/0").body } }.each(&:wait)
      yield client
    end
  ensure
    client&.close
  end

  # CALLS calls at once through the breaker, each under `deadline`, each asking for `ms`
  # milliseconds, or with ms :held for an answer the moment the busy fiber starts. With hog:
  # true, a fiber that the reactor resumes for I/O right after the calls have sent their
  # requests keeps the CPU for HOG seconds, inside that poll, so the reactor looks at the
  # calls' sockets again only after their deadlines have passed.
  # @return [Array] per call the body, or the class of the error the call ended with
  def round(client, breaker, ms, hog: false, deadline: DEADLINE)
    path = ms == :held ? "/held/round#{@rounds += 1}" : "/#{ms}"
    reader, writer = IO.pipe
    hogging = Weft.spawn { reader.wait_readable && busy(path) } if hog
    calls = Array.new(CALLS) do
      Weft.spawn do
        Weft.deadline(deadline) do
          breaker.call(fallback: ->(error) { error.class }) { client.get(path).body }
        end
      end
    end
    # Spawned after the calls, so it runs once each has sent its request and waits.
    Weft.spawn { writer.write("x") } if hog
    outcomes = calls.map(&:wait)
    hogging&.wait
    outcomes
  ensure
    reader.close
    writer.close
  end

  # The busy fiber: lets the peer answer the held calls of `path`, then keeps the CPU.
  def busy(path)
    @gates.write("#{path[%r{/held/(\w+)}, 1]}\n") if path.start_with?("/held/")
    spin(HOG)
  end

  def spin(seconds)
    spin_until = Weft::Timers.now + seconds
    nil while Weft::Timers.now < spin_until
  end

  # The peer answers at once, while the caller's reactor is busy: it gets back to the sockets
  # after 150 ms, past the deadlines. Their timers wait for the reactor's next look, which reads
  # the answers: the calls succeed. On main every call failed and counted, and the breaker opened.
  def test_a_healthy_peer_behind_a_busy_caller_keeps_its_breaker_closed
    b = breaker
    with_client do |client|
      assert_equal ["ok"] * CALLS, round(client, b, :held, hog: true)
    end
    assert_equal :closed, b.state
    assert_equal [CALLS, CALLS, 0, 0, 0], b.statistics.values_at(:calls, :successes, :failures, :starved, :opened)
  end

  # The same 50 ms deadline, an idle caller, a peer that takes 400 ms: the reactor waited for the
  # answers through the deadline, and the calls count against the peer.
  def test_a_slow_peer_behind_an_idle_caller_opens_its_breaker
    b = breaker
    with_client do |client|
      assert_equal [Weft::HTTP::DeadlineExceeded], round(client, b, SLOW).uniq
    end
    assert_equal :open, b.state
    stats = b.statistics
    # A loaded machine may hold the reactor up at a deadline now and then: those are starved.
    assert_equal CALLS, stats[:failures] + stats[:starved]
    assert_operator stats[:failures], :>=, CALLS / 2
  end

  # Behind the same busy caller, a peer that takes 400 ms is still judged: the reactor looked
  # again after the deadlines, and the answers were not there.
  def test_a_busy_caller_still_sees_a_slow_peer
    b = breaker
    with_client do |client|
      assert_equal ["ok"] * CALLS, round(client, b, :held, hog: true)
      assert_equal [Weft::HTTP::DeadlineExceeded], round(client, b, SLOW, hog: true).uniq
    end
    assert_equal :open, b.state
    stats = b.statistics
    assert_equal [CALLS, 1, CALLS], [stats[:successes], stats[:opened], stats[:failures] + stats[:starved]]
    assert_operator stats[:failures], :>=, CALLS / 2
  end

  # Starved calls leave the window as it was: a round of callers busy past their deadlines
  # before they ask, then healthy rounds, then slow ones; the breaker opens on the slow ones
  # alone, half the window.
  def test_starved_calls_neither_open_nor_hide_a_slow_peer
    b = breaker
    with_client do |client|
      late_callers(client, b)
      assert_equal ["ok"] * CALLS, round(client, b, PROMPT)
      assert_equal :closed, b.state
      round(client, b, SLOW)
    end
    assert_equal :open, b.state
    stats = b.statistics
    assert_equal [CALLS, CALLS, 1], stats.values_at(:starved, :successes, :opened)
    assert_operator stats[:failures], :>=, CALLS / 2
  end

  # slow_call (50 ms) with no deadline to speak of: the answers come at once but are read after
  # 150 ms. Slow in the caller's hands only: starved, where main counted every call slow and
  # opened the breaker. A peer that takes 400 ms behind an idle caller is slow.
  def test_slow_calls_are_judged_by_when_the_answer_came
    b = breaker(slow_call: 0.05)
    with_client do |client|
      assert_equal ["ok"] * CALLS, round(client, b, :held, hog: true, deadline: 5)
      assert_equal [:closed, 0, CALLS], [b.state, b.statistics[:slow], b.statistics[:starved]], b.statistics.inspect
      assert_equal ["ok"] * CALLS, round(client, b, SLOW, deadline: 5)
    end
    assert_equal :open, b.state
    assert_operator b.statistics[:slow], :>=, CALLS / 2
  end

  # CALLS calls whose callers spend their own deadline on the CPU before they ask: the client
  # finds no time left and raises at once.
  # @return [Array] per call the class of the error it ended with
  def late_callers(client, breaker)
    calls = Array.new(CALLS) do
      Weft.spawn do
        Weft.deadline(DEADLINE) do
          breaker.call(fallback: ->(error) { error.class }) do
            spin(DEADLINE + 0.005)
            client.get("/#{PROMPT}").body
          end
        end
      end
    end
    calls.map(&:wait)
  end

  # Nothing was asked of the peer in time: the calls are starved (main: failures, open).
  def test_a_caller_late_before_it_asks_is_starved
    b = breaker
    with_client do |client|
      outcomes = late_callers(client, b)
      assert outcomes.all? { |outcome| outcome.is_a?(Class) && outcome <= Weft::DeadlineExceeded }, outcomes.uniq.inspect
    end
    assert_equal [:closed, 0, CALLS], [b.state, b.statistics[:failures], b.statistics[:starved]]
  end

  # A breaker inside a scatter's items: the scatter's deadline passes during the busy turn, and
  # its timer waits for the reactor's next look, which reads the items' answers (main: every
  # item late, the breaker open).
  def test_scatter_items_answered_behind_a_busy_caller_succeed
    b = breaker
    with_client do |client|
      reader, writer = IO.pipe
      hogging = Weft.spawn { reader.wait_readable && busy("/held/scatter") }
      results = Weft.scatter(Array.new(CALLS) { |index| index }, deadline: DEADLINE, fallback: ->(_item, error) { error.class }) do |index|
        # The last item wakes the busy fiber; every item has sent its request by the next poll.
        writer.write("x") if index == CALLS - 1
        b.call { client.get("/held/scatter").body }
      end
      hogging.wait
      reader.close
      writer.close
      assert_equal ["ok"] * CALLS, results
    end
    assert_equal [:closed, CALLS, 0], [b.state, b.statistics[:successes], b.statistics[:failures]]
  end

  # In threads nothing tells the caller's lateness from the peer's: the clock decides, as before.
  def test_outside_a_reactor_the_clock_decides
    b = breaker(minimum_calls: 2)
    2.times do
      Weft.deadline(DEADLINE) { b.call(fallback: ->(error) { error.class }) { sleep(DEADLINE * 4) } }
    end
    assert_equal [:open, 2, 0], [b.state, b.statistics[:failures], b.statistics[:starved]]
  end
end
