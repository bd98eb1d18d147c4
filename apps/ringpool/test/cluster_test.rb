# frozen_string_literal: true

require_relative "test_helper"
require_relative "support/process_cluster"

# Shards in real processes (weft serve, one shard per worker) sharing one PostgreSQL.
class RingpoolClusterTest < Minitest::Test
  include Ringpool::Test::Helpers

  def setup
    @db = fresh_database
  end

  def teardown
    @cluster&.stop
    @second&.stop
  end

  # Below Linux's ephemeral range (32768-60999 by default): a port picked there is free when
  # checked, but an outgoing connection (a shard's, the test's) can take it as its local port
  # before the shard binds it; connect() prefers the even ports that bind(0) leaves.
  PEER_PORTS = (20_000..32_000).freeze

  # @return [Integer] the first of `count` free consecutive TCP ports on 127.0.0.1
  def consecutive_free_ports(count)
    20.times do
      base = rand(PEER_PORTS.begin..(PEER_PORTS.end - count))
      servers = []
      begin
        count.times { |i| servers << TCPServer.new("127.0.0.1", base + i) }
        return base
      rescue SystemCallError
        next
      ensure
        servers.each(&:close)
      end
    end
    flunk "no #{count} consecutive free ports"
  end

  def start_cluster(shards, **options)
    @cluster = Ringpool::Test::ProcessCluster.new(database_url: @db, shards: shards, **options).start
    @cluster.port
  end

  # Pools spread over the shards (fair shares); whichever shard takes a request serves its own
  # pools and gets the others' numbers from their owners over their unix sockets.
  def test_any_shard_answers_for_every_pool
    port = start_cluster(3)
    pools = Array.new(6) { create_pool(port, count: 20, lockout: 3600) }
    owners = wait_until(10, "pools spread two per shard") do
      owners = pools.map { |pool| api(port, :get, "/ring_pools/#{pool['id']}").last["owner"] }
      owners.none?(&:nil?) && owners.tally.values.sort == [2, 2, 2] && owners
    end
    assert_equal 3, owners.uniq.size
    # Which worker accepts a connection is the kernel's choice: now and then it gives ten in a
    # row to one (CI, 2026-12-06), so rounds go on past ten until two shards have taken some.
    entry_shards = []
    rounds = 0
    while rounds < 10 || (entry_shards.uniq.size < 2 && rounds < 100)
      items = pools.map { |pool| { "ring_pool" => pool["id"], "params" => { "round" => rounds } } }
      answers = allocate(port, items)
      answers.each_with_index do |answer, i|
        refute answer["overflow"], "round #{rounds}: #{answer.inspect}\n#{@cluster.log_tail}"
        assert_includes pools[i]["numbers"].map { |n| n["number"] }, answer["number"]
      end
      entry_shards << api(port, :get, "/health").last["shard"]
      rounds += 1
    end
    assert_equal 6 * rounds, sql(@db, "select count(*) from allocations").first["count"].to_i
    assert_operator entry_shards.uniq.size, :>=, 2, "the requests all went to one shard: #{entry_shards.tally}"
    # Keep-alive between shards: fewer connections opened than requests sent over them.
    peers = Array.new(3) { |index| @cluster.shard_health(index).fetch("peers").values }.flatten
    requests = peers.sum { |peer| peer["requests"] }
    opened = peers.sum { |peer| peer["connections_opened"] }
    assert_operator requests, :>=, 20, "10 requests or more, each fanning out to two peers"
    assert_operator opened, :<, requests / 2, "peer connections are not kept alive: #{peers}"
  end

  # RINGPOOL_SHARD_PORT: each shard also serves the public API on an address of its own (for a
  # front proxy that steers around a stalled shard), and answers there for every pool.
  def test_each_shard_serves_the_public_api_on_its_own_port
    base = consecutive_free_ports(2)
    port = start_cluster(2, env: { "RINGPOOL_SHARD_PORT" => base.to_s })
    pools = Array.new(2) { create_pool(port, count: 5, lockout: 3600) }
    wait_until(10, "each shard owns a pool") do
      pools.map { |pool| api(port, :get, "/ring_pools/#{pool['id']}").last["owner"] }.compact.uniq.size == 2
    end
    shards = [base, base + 1].map { |own| wait_until(10, "port #{own} answers") { api(own, :get, "/health").last["shard"] } }
    assert_equal 2, shards.uniq.size, "both ports reached one shard: #{shards}"
    [base, base + 1].each do |own|
      answers = allocate(own, pools.map { |pool| { "ring_pool" => pool["id"], "params" => { "via" => own } } })
      answers.each { |answer| refute answer["overflow"], "via port #{own}: #{answer.inspect}\n#{@cluster.log_tail}" }
    end
    assert_equal 4, sql(@db, "select count(*) from allocations").first["count"].to_i
  end

  # Two separate clusters (two ports, two socket folders: what two hosts would be) on one
  # database split the pools between them, and either one answers for every pool.
  # Two clusters sharing one database, as on two hosts: their shards reach each other over TCP
  # (RINGPOOL_PEER_ADDRESS), split the pools and each answers for all of them.
  def test_two_clusters_share_one_database_over_tcp
    first, second = Array.new(2) { consecutive_free_ports(2) }
    port = start_cluster(2, peer_port: first)
    @second = Ringpool::Test::ProcessCluster.new(database_url: @db, shards: 2, peer_port: second).start
    pools = Array.new(4) { create_pool(port, count: 20, lockout: 3600) }
    owners = wait_until(10, "pools spread one per shard over both clusters") do
      owners = pools.map { |pool| api(port, :get, "/ring_pools/#{pool['id']}").last["owner"] }
      owners.none?(&:nil?) && owners.uniq.size == 4 && owners
    end
    assert_equal [first, first + 1, second, second + 1].map { |p| "http://127.0.0.1:#{p}" }.sort, owners.sort
    [port, @second.port].each do |entry|
      answers = allocate(entry, pools.map { |pool| { "ring_pool" => pool["id"] } })
      assert(answers.none? { |answer| answer["overflow"] }, answers.inspect)
    end
  end

  # Allocates `items`, again while an answer says shard_unavailable (for up to 3 s: two
  # ownership ticks), and returns the first answers without it.
  def settled(port, items)
    wait_until(3, "answers without shard_unavailable") do
      answers = allocate(port, items)
      answers.none? { |answer| answer["reason"] == "shard_unavailable" } && answers
    end
  end

  # kill -9 of a shard: PostgreSQL ends its lock session, so its pools are free at once; another
  # shard (or its replacement) takes them over within 5 s, rebuilding their state from the
  # table: numbers handed out before the kill stay locked out.
  def test_a_killed_shards_pools_are_taken_over_within_five_seconds
    port = start_cluster(3)
    pool = create_pool(port, count: 3, lockout: 3600)
    owner = wait_until(5, "an owner") { api(port, :get, "/ring_pools/#{pool['id']}").last["owner"] }
    before = allocate(port, [{ "ring_pool" => pool["id"], "params" => { "when" => "before" } }]).first
    refute before["overflow"]

    Process.kill("KILL", @cluster.pid_of(owner))
    killed_at = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    answer = nil
    loop do
      answer = assert_elapsed_under(1.5, "an answer while the owner is dead") do
        allocate(port, [{ "ring_pool" => pool["id"], "params" => { "when" => "after" } }]).first
      end
      break unless answer["overflow"]
      assert_equal "shard_unavailable", answer["reason"]
      flunk("not taken over within 5 s\n#{@cluster.log_tail}") if Process.clock_gettime(Process::CLOCK_MONOTONIC) - killed_at > 5
      sleep 0.05
    end
    taken_over = Process.clock_gettime(Process::CLOCK_MONOTONIC) - killed_at
    assert_operator taken_over, :<, 5
    refute_equal before["number"], answer["number"], "the state was not rebuilt from the table"
    # The other shards learn of the new owner (and forget their breaker on the dead one) on
    # their next ownership tick; until then an item they route may still get shard_unavailable.
    third = settled(port, [{ "ring_pool" => pool["id"] }] * 2)
    assert_equal [false, true], third.map { |a| a["overflow"] }, "3 numbers: one before, one after, one more, then exhausted: #{third.inspect}\n#{@cluster.log_tail}"
    assert_equal "exhausted", third.last["reason"]
    # Overflow numbers are counted once each, whichever shard took the request.
    6.times { assert_equal "exhausted", settled(port, [{ "ring_pool" => pool["id"] }]).first["reason"] }
    wait_until(5, "7 exhausted overflows counted") { api(port, :get, "/ring_pools/#{pool['id']}").last["overflows"]["exhausted"] == 7 }
  end

  # A shard that stops answering (SIGSTOP): its pools' items get the overflow number within the
  # deadline (1 s here, so that a loaded machine does not miss it for the healthy shard), the
  # others are served as usual; after SIGCONT it serves them again.
  # After SIGCONT, the other shard does not send the resumed one all its traffic at once: its
  # breaker for that peer, opened while the peer was stopped, ramps (a share of the calls,
  # the rest answered with the overflow number) before it closes.
  def test_a_resumed_shard_is_trusted_again_gradually
    port = start_cluster(2, deadline_ms: 300, env: { "RINGPOOL_BREAKER_OPEN_FOR" => "1", "RINGPOOL_BREAKER_RAMP_FOR" => "3",
                                                     "RINGPOOL_BREAKER_MINIMUM_CALLS" => "4" })
    pools = Array.new(4) { create_pool(port, count: 500, lockout: 1) }
    owners = wait_until(10, "pools spread two per shard") do
      owners = pools.map { |pool| api(port, :get, "/ring_pools/#{pool['id']}").last["owner"] }
      owners.none?(&:nil?) && owners.tally.values.sort == [2, 2] && owners
    end
    stopped = owners.first
    other = (owners - [stopped]).first
    other_index = Integer(other[/shard-(\d+)\.sock\z/, 1])
    breaker = -> { @cluster.shard_health(other_index).dig("peers", stopped, "breaker") }
    theirs = pools.select.with_index { |_, i| owners[i] == stopped }.map { |pool| { "ring_pool" => pool["id"] } }
    pid = @cluster.pid_of(stopped)
    Process.kill("STOP", pid)
    begin
      # Every request now reaches the other shard (the stopped one accepts nothing).
      wait_until(10, "the breaker for the stopped shard open") do
        assert_equal ["shard_unavailable"], allocate(port, theirs).map { |answer| answer["reason"] }.uniq
        breaker.call == "open"
      end
    ensure
      Process.kill("CONT", pid)
    end
    states = []
    answers = []
    wait_until(15, "the breaker closed again") do
      states << breaker.call
      answers.concat(allocate(port, theirs * 5))
      states.last == "closed"
    end
    assert_includes states, "ramping", "the breaker closed without ramping: #{states.uniq.inspect}"
    assert(answers.any? { |answer| answer["overflow"] }, "every item was sent to the resumed shard at once")
    assert(answers.any? { |answer| !answer["overflow"] }, "the resumed shard got no items while ramping")
  rescue Minitest::Assertion => e
    raise e.class, "#{e.message}\nstates: #{states.inspect}\n#{@cluster.log_tail}"
  end

  def test_a_stopped_shard_costs_its_pools_the_overflow_number_within_the_deadline
    port = start_cluster(2, deadline_ms: 1_000)
    pools = Array.new(4) { create_pool(port, count: 200, lockout: 3600) }
    owners = wait_until(10, "pools spread two per shard") do
      owners = pools.map { |pool| api(port, :get, "/ring_pools/#{pool['id']}").last["owner"] }
      owners.none?(&:nil?) && owners.tally.values.sort == [2, 2] && owners
    end
    stopped = owners.first
    pid = @cluster.pid_of(stopped)
    Process.kill("STOP", pid)
    begin
      items = pools.map { |pool| { "ring_pool" => pool["id"] } }
      answers = assert_elapsed_under(2.5, "answering with a shard stopped (1 s deadline)") { allocate(port, items) }
      answers.each_with_index do |answer, i|
        if owners[i] == stopped
          assert_equal [true, "shard_unavailable"], answer.values_at("overflow", "reason")
        else
          refute answer["overflow"], answer.inspect
        end
      end
    ensure
      Process.kill("CONT", pid)
    end
    last = nil
    wait_until(10, "the stopped shard's pools served again") do
      sleep 0.1 # each round uses up a number of each pool: leave the pools some
      last = allocate(port, pools.map { |pool| { "ring_pool" => pool["id"] } })
      last.none? { |a| a["overflow"] }
    end
  rescue Minitest::Assertion => e
    raise e.class, "#{e.message}\nlast answers: #{last.inspect}\n#{@cluster.log_tail}"

  end
end
