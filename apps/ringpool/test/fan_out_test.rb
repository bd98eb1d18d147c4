# frozen_string_literal: true

require_relative "test_helper"

# FanOut: every peer at once, under the caller's deadline; whatever goes wrong with a peer
# costs only its own items, which get their pools' overflow numbers.
class RingpoolFanOutTest < Minitest::Test
  include Ringpool::Test::Helpers

  POOL = Ringpool::RingPool.new(id: 7, overflow_number: "+15550999999", lockout_seconds: 60)

  # Fake peers, each on a unix socket of its own: one answers properly, the others misbehave.
  PEERS = {
    "good" => lambda do |env|
      count = JSON.parse(env["rack.input"].read)["items"].size
      until_at = Ringpool::Clock.now + 60_000_000
      results = Array.new(count) { |i| [until_at, "+1555000000#{i}"] }
      [200, { "content-type" => "application/json" }, [JSON.generate({ "results" => results })]]
    end,
    "slow" => ->(_env) { sleep 5 },
    "garbage" => ->(_env) { [200, {}, ["not json"]] },
    "short" => ->(_env) { [200, {}, ['{"results": []}']] },
    "error" => ->(_env) { [500, {}, ["boom"]] },
    "not_results" => ->(_env) { [200, {}, ['{"results": [[1, "not a number"], {"no": "error"}]}']] }
  }.freeze

  # Yields peer name => URL (plus "gone": a socket nobody listens on).
  def with_peers
    Dir.mktmpdir do |dir|
      servers = PEERS.map { |name, app| Weft::Server.new(app, binds: ["unix://#{dir}/#{name}.sock"], shutdown_timeout: 1) }
      threads = servers.map { |server| Thread.new { server.run } }
      yield(PEERS.keys.to_h { |name| [name, "unix://#{dir}/#{name}.sock"] }.merge("gone" => "unix://#{dir}/gone.sock"))
    ensure
      servers&.each(&:stop)
      threads&.each { |thread| thread.join(5) }
    end
  end

  def items(count)
    Array.new(count) { Ringpool::Allocator::Item.new(POOL, "{}") }
  end

  def test_each_peer_costs_only_its_own_items
    with_peers do |urls|
      fan_out = Ringpool::FanOut.new
      answers = Weft.run do
        assert_elapsed_under(1.5, "the slow peer held everyone up") do
          Weft.deadline(0.3) { fan_out.call(urls.values.to_h { |url| [url, items(2)] }) }
        end
      end
      assert_equal [["+15550000000", false], ["+15550000001", false]], answers[urls["good"]].map { |a| [a.number, a.overflow?] }
      (urls.keys - ["good"]).each do |name|
        assert_equal [["+15550999999", "shard_unavailable"]] * 2, answers[urls[name]].map { |a| [a.number, a.reason] }, name
      end
    ensure
      fan_out&.close
    end
  end

  # A peer that keeps missing the deadline is not called at all once its breaker opens (its
  # items get the overflow number at once), and gets calls back gradually when it recovers.
  def test_a_failing_peer_is_skipped_then_let_back_gradually
    mode = [:slow]
    received = Queue.new
    peer = lambda do |env|
      received << true
      sleep 1 if mode.first == :slow
      PEERS["good"].call(env)
    end
    Dir.mktmpdir do |dir|
      server = Weft::Server.new(peer, binds: ["unix://#{dir}/peer.sock"], shutdown_timeout: 1)
      thread = Thread.new { server.run }
      url = "unix://#{dir}/peer.sock"
      fan_out = Ringpool::FanOut.new(breaker: { window_calls: 4, minimum_calls: 4, open_for: 0.5, ramp: [0.25, 0.5], ramp_for: 1, ramp_minimum_calls: 2 })
      # Short deadlines only where the peer must miss them: elsewhere (the peer answers at once,
      # or must not be asked) a 1 s deadline costs nothing and leaves room for a stall of this
      # process (peer and caller share it) of a few hundred ms, which a 0.2 s one did not (a
      # thread holding the GVL in 200 ms bursts failed the ramp's probe).
      ask = ->(deadline = 1.0) { Weft.run { Weft.deadline(deadline) { fan_out.call({ url => items(1) }) } }.fetch(url).first }
      4.times { assert_equal "shard_unavailable", ask.call(0.2).reason }
      assert_equal :open, fan_out.breaker(url).state
      sent = received.size
      # Admitted, the call would wait its whole 1 s for the sleeping peer.
      answer = assert_elapsed_under(0.5, "an open breaker still waited for the peer") { ask.call }
      assert_equal "shard_unavailable", answer.reason
      assert_equal sent, received.size, "an open breaker let a call through"

      mode[0] = :good
      sleep 0.55 # open_for
      ramp = Array.new(4) { ask.call }
      assert_equal :ramping, fan_out.breaker(url).state
      assert ramp.first.tracked?, "the first call of a ramp step is a probe"
      assert ramp.any?(&:overflow?), "ramping admitted every call: #{ramp.map(&:kind)}"
      wait_until(5, "the breaker closed again") { ask.call.tracked? && fan_out.breaker(url).state == :closed }
      assert Array.new(5) { ask.call }.all?(&:tracked?)
    ensure
      fan_out&.close
      server&.stop
      thread&.join(5)
    end
  end

  # A worker replaced after a crash answers at the dead one's URL as another process: the
  # breaker opened on the dead process is forgotten, and the new one is called at once.
  def test_a_peer_answered_by_another_process_starts_with_a_fresh_breaker
    with_peers do |urls|
      url = urls["gone"]
      fan_out = Ringpool::FanOut.new(breaker: { window_calls: 2, minimum_calls: 2, open_for: 60 })
      ask = -> { Weft.run { Weft.deadline(0.5) { fan_out.call({ url => items(1) }) } }.fetch(url).first }
      fan_out.shards_seen(url => "host/101/a")
      2.times { ask.call }
      assert_equal :open, fan_out.breaker(url).state
      fan_out.shards_seen(url => "host/101/a", urls["good"] => "host/7/b") # the same process: nothing forgotten
      assert_equal :open, fan_out.breaker(url).state
      fan_out.shards_seen(url => "host/202/c")
      assert_equal :closed, fan_out.breaker(url).state
    ensure
      fan_out&.close
    end
  end

  # Requests that ask a peer at the same time share one call, and each gets its own items'
  # answers, in order.
  def test_requests_asking_at_once_share_a_call
    calls = Queue.new
    peer = lambda do |env|
      items = JSON.parse(env["rack.input"].read)["items"]
      calls << items.size
      results = items.map { |_pool, params| [Ringpool::Clock.now + 60_000_000, "+1555000#{params.fetch('n').to_s.rjust(4, '0')}"] }
      [200, { "content-type" => "application/json" }, [JSON.generate({ "results" => results })]]
    end
    Dir.mktmpdir do |dir|
      server = Weft::Server.new(peer, binds: ["unix://#{dir}/peer.sock"], shutdown_timeout: 1)
      thread = Thread.new { server.run }
      url = "unix://#{dir}/peer.sock"
      fan_out = Ringpool::FanOut.new
      answers = Weft.run do
        Array.new(6) do |request|
          Weft.spawn do
            items = Array.new(3) { |i| Ringpool::Allocator::Item.new(POOL, %({"n":#{request * 10 + i}})) }
            Weft.deadline(2) { fan_out.call({ url => items }) }.fetch(url).map(&:number)
          end
        end.map(&:wait)
      end
      assert_equal Array.new(6) { |request| Array.new(3) { |i| "+1555000#{(request * 10 + i).to_s.rjust(4, '0')}" } }, answers
      sizes = Array.new(calls.size) { calls.pop }
      assert_equal 18, sizes.sum
      assert_operator sizes.size, :<=, Ringpool::FanOut::CALLS_IN_FLIGHT, "calls: #{sizes.inspect}"
    ensure
      fan_out&.close
      server&.stop
      thread&.join(5)
    end
  end

  # A peer that takes all the time it is told it has (its INSERT is slow: it answers at its
  # deadline, with storage_unavailable) still answers before the caller gives up, so its calls
  # count as successes and its breaker stays closed.
  def test_a_peer_using_all_its_time_answers_in_time_and_keeps_its_breaker_closed
    told = Queue.new
    peer = lambda do |env|
      seconds = Float(env["HTTP_RINGPOOL_DEADLINE"])
      told << seconds
      count = JSON.parse(env["rack.input"].read)["items"].size
      sleep seconds
      [200, { "content-type" => "application/json" }, [JSON.generate({ "results" => ["storage_unavailable"] * count })]]
    end
    Dir.mktmpdir do |dir|
      server = Weft::Server.new(peer, binds: ["unix://#{dir}/peer.sock"], shutdown_timeout: 1)
      thread = Thread.new { server.run }
      url = "unix://#{dir}/peer.sock"
      # Two calls, either of which opens the breaker if judged late.
      fan_out = Ringpool::FanOut.new(breaker: { window_calls: 2, minimum_calls: 2 })
      # 2 s: the share left for the way back (400 ms) outlasts two stalls of 200 ms of this
      # process (peer and caller share it: a major GC, another thread holding the GVL), one on
      # the way to the peer (it is told its time when the request is made) and one on the way
      # back. A thread holding the GVL in 200 ms bursts (libc usleep through Fiddle, need_gvl)
      # made 4-8 of 8 calls late at 0.5 s and 0-6 of 8 at 1 s (by the bursts' phase), 0 of 8
      # at 1.5 and 2 s, with gaps of 50, 300 and 800 ms between bursts. Told the whole time
      # instead (REPLY_SHARE 1.0), the peer answers late in every run without any stall.
      answers = Array.new(2) { Weft.run { Weft.deadline(2.0) { fan_out.call({ url => items(2) }) } }.fetch(url) }
      # shard_unavailable here: an answer came after the caller's deadline. The message shows
      # the breaker's counts, to tell a stall (late answers still read: successes) from a peer
      # judged late (failures).
      assert_equal [["+15550999999", "storage_unavailable"]] * 4, answers.flatten.map { |a| [a.number, a.reason] },
                   -> { "breaker: #{fan_out.breaker(url).statistics.slice(:successes, :failures, :starved, :state)}" }
      assert_equal :closed, fan_out.breaker(url).state
      assert_operator told.pop, :<=, 2.0 * Ringpool::FanOut::REPLY_SHARE
    ensure
      fan_out&.close
      server&.stop
      thread&.join(5)
    end
  end

  # A request that collects its answers only after its deadline passed (its own INSERT took
  # that long) still gets the peer's numbers when the call had ended: they are stored.
  def test_answers_that_arrived_are_used_after_the_deadline
    with_peers do |urls|
      fan_out = Ringpool::FanOut.new
      answers = Weft.run do
        # 0.5 s for the peer's answer, so that a stall of a few hundred ms does not end the call
        # without it.
        tickets = Weft.deadline(0.5) { fan_out.dispatch({ urls["good"] => items(2) }) }
        sleep 0.6 # the call ends meanwhile, and the deadline passes
        fan_out.results(tickets)
      end
      assert_equal [["+15550000000", false], ["+15550000001", false]], answers[urls["good"]].map { |a| [a.number, a.overflow?] }
    ensure
      fan_out&.close
    end
  end

  def test_connections_are_kept_alive
    with_peers do |urls|
      fan_out = Ringpool::FanOut.new
      Weft.run { 5.times { Weft.deadline(2) { fan_out.call({ urls["good"] => items(3) }) } } }
      assert_equal({ urls["good"] => { "connections_opened" => 1, "requests" => 5, "breaker" => "closed", "admitted_fraction" => 1.0,
                                       "starved" => 0 } }, fan_out.statistics)
    ensure
      fan_out&.close
    end
  end

  # Requests that ask one peer at once share a call, but never past what the peer reads of a
  # body (PeerAPI: 4.5 MiB): three requests of 1,000 items with 2 KB params each went as one
  # 6 MB call, which the peer cut short and refused, so every item of all three (and of any
  # other request in the batch) got shard_unavailable and the peer's breaker a failure.
  def test_a_batch_never_grows_past_what_a_peer_reads
    sizes = Queue.new
    peer = lambda do |env|
      body = env["rack.input"].read
      sizes << body.bytesize
      PEERS["good"].call("rack.input" => StringIO.new(body))
    end
    Dir.mktmpdir do |dir|
      server = Weft::Server.new(peer, binds: ["unix://#{dir}/peer.sock"], shutdown_timeout: 1)
      thread = Thread.new { server.run }
      url = "unix://#{dir}/peer.sock"
      fan_out = Ringpool::FanOut.new
      params = JSON.generate({ "campaign" => "x" * 2_000 })
      large = Array.new(1_000) { Ringpool::Allocator::Item.new(POOL, params) }
      answers = Weft.run do
        Weft.deadline(20) do
          tickets = Array.new(3) { fan_out.dispatch({ url => large }) }
          tickets.map { |ticket| fan_out.results(ticket).fetch(url) }
        end
      end
      answers.each { |answer| assert_equal [false] * 1_000, answer.map(&:overflow?) }
      seen = Array.new(sizes.size) { sizes.pop }
      assert_operator seen.size, :>=, 2, "more than one call: #{seen}"
      assert(seen.all? { |size| size <= Ringpool::PeerAPI::MAX_BODY }, "every call within the peer's limit: #{seen}")
    ensure
      fan_out&.close
      server&.stop
      thread&.join(5)
    end
  end
end
