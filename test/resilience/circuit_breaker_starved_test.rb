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
  # How long the busy fiber waits for the peer to have answered every held call. 3 HOG (0.45 s)
  # was too short once in a full suite on two cores: 3 of 10 answers were not in yet, and those
  # calls failed for the peer's lateness in getting a core, not the caller's.
  ANSWERED_WITHIN = 3.0

  # GET /MS answers "ok" after MS milliseconds; GET /held/TOKEN as soon as the gate TOKEN is
  # open, which a line "TOKEN" on a connection to the second port opens. On that connection it
  # says "TOKEN received" once CALLS (its argument) such requests wait, and "TOKEN answered"
  # once it has answered them all. On keep-alive connections, a thread per connection.
  PEER = <<~'RUBY'
    require "socket"
    calls = Integer(ARGV[0])
    server = TCPServer.new("127.0.0.1", 0)
    control = TCPServer.new("127.0.0.1", 0)
    $stdout.puts "#{server.addr[1]} #{control.addr[1]}"
    $stdout.flush
    lock = Mutex.new
    opened = ConditionVariable.new
    gates = {}
    waiting = Hash.new(0)
    answered = Hash.new(0)
    controls = []
    say = ->(line) { controls.each { |socket| socket.write("#{line}\n") } }
    Thread.new do
      loop do
        Thread.new(control.accept) do |socket|
          lock.synchronize { controls << socket }
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
            lock.synchronize do
              say.call("#{token} received") if (waiting[token] += 1) == calls
              opened.wait(lock) until gates[token]
            end
          else
            sleep(line[%r{\AGET /(\d+)}, 1].to_i / 1000.0)
          end
          client.write("HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
          if token
            lock.synchronize { say.call("#{token} answered") if (answered[token] += 1) == calls }
          end
        end
      rescue IOError, SystemCallError
        nil
      ensure
        client.close
      end
    end
  RUBY

  def setup
    @peer = IO.popen([RbConfig.ruby, "-e", PEER, CALLS.to_s])
    port, control = @peer.gets.split.map { |number| Integer(number) }
    @url = "http://127.0.0.1:#{port}"
    @gates = TCPSocket.new("127.0.0.1", control)
    @heard = +""
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
    hogging = Weft.spawn { reader.wait_readable && busy(path, deadline) } if hog
    @asked = []
    calls = Array.new(CALLS) do
      Weft.spawn do
        Weft.deadline(deadline) do
          @asked << Weft::Timers.now # no later than the breaker's own start of the call
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

  # The busy fiber. For held calls it lets the peer answer them and keeps the CPU at least
  # until the peer has written every answer (on a loaded machine the peer process may take
  # longer than HOG to get a core: up to ANSWERED_WITHIN), so that the answers are in the
  # sockets before the reactor looks again. Calls with a long deadline are first waited for (the reactor
  # running) until the peer has every request; calls with a 50 ms one cannot be, and rely on
  # having sent theirs by the poll that starts this fiber. Then, or at once for other calls,
  # it keeps the CPU for HOG seconds in all.
  def busy(path, deadline = DEADLINE)
    token = path[%r{/held/(\w+)}, 1]
    hear("#{token} received", wait: true, within: 10) if token && deadline >= 1
    started = Weft::Timers.now
    if token
      @gate_opened = Weft::Timers.now
      @gates.write("#{token}\n")
      hear("#{token} answered", wait: false, within: ANSWERED_WITHIN)
    end
    spin(HOG - (Weft::Timers.now - started))
  end

  # Reads the peer's control connection until `line` comes or `within` seconds pass: waiting
  # for it in this fiber (wait: true), or keeping the CPU meanwhile (wait: false, reads that
  # never wait). What the peer said goes to @heard.
  def hear(line, wait:, within:)
    give_up = Weft::Timers.now + within
    until @heard.include?("#{line}\n") || Weft::Timers.now > give_up
      @gates.wait_readable(1) if wait
      chunk = @gates.read_nonblock(256, exception: false)
      @heard << chunk if chunk.is_a?(String)
    end
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
    # The slow round's calls are failures, or starved where the machine held the reactor up
    # at their deadline.
    assert_equal [CALLS, 1], stats.values_at(:successes, :opened)
    assert_equal 2 * CALLS, stats[:starved] + stats[:failures]
    assert_operator stats[:failures], :>=, CALLS / 2
  end

  # slow_call (50 ms) with no deadline to speak of: the answers come at once but are read after
  # 150 ms. Slow in the caller's hands only: starved, where main counted every call slow and
  # opened the breaker. A peer that takes 400 ms behind an idle caller is slow.
  def test_slow_calls_are_judged_by_when_the_answer_came
    b = nil
    with_client do |client|
      # A call asked more than slow_call before the busy fiber let the peer answer really got
      # its answer late, and may count slow: the machine held the round up between the calls'
      # starts and the busy fiber's (under CPU load, on Ruby 3.3 mostly, one to six of ten).
      # Such a round says nothing about the breaker: it is played again, up to three times.
      3.times do
        b = breaker(slow_call: 0.05)
        assert_equal ["ok"] * CALLS, round(client, b, :held, hog: true, deadline: 5)
        break if @asked.all? { |asked| @gate_opened - asked < 0.05 }
      end
      assert(@asked.all? { |asked| @gate_opened - asked < 0.05 }, "three rounds held up before the peer could answer")
      # The answers are all in before the reactor looks again, but on a loaded machine the
      # reactor may take a second poll to get to one of them, and then that poll's look is the
      # earliest the answer is known to have come (Scheduler#readiness_floor): slow. A few such
      # calls cannot open the breaker; main counted all ten slow.
      stats = b.statistics
      assert_equal [:closed, CALLS], [b.state, stats[:slow] + stats[:starved]], stats.inspect
      assert_operator stats[:starved], :>=, CALLS - 2, stats.inspect
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
