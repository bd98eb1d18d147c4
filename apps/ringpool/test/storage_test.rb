# frozen_string_literal: true

require_relative "test_helper"

# PostgreSQL is the source of truth: with it stopped the shard answers at once with overflow
# numbers (storage_unavailable) and never a tracked number it has not stored; when it is back,
# tracked numbers are handed out again. And if two shards ever both believe they own a pool,
# the exclusion constraint keeps any number from being stored twice within its lockout.
class RingpoolStorageTest < Minitest::Test
  include Ringpool::Test::Helpers

  def test_postgres_stopped_gives_storage_unavailable_at_once_and_recovers
    cluster = Weft::Test::PostgresCluster.new.start # a private one: this test stops it
    db = fresh_database(cluster)
    with_shard(db, deadline: 2.0) do |port|
      pool = create_pool(port, count: 50, lockout: 3600)
      items = Array.new(5) { { "ring_pool" => pool["id"] } }
      before = allocate(port, items)
      assert(before.none? { |a| a["overflow"] })
      before_takeovers = api(port, :get, "/health").last["takeovers"]
      shards = sql(db, "select url, pid, process from ringpool_shards").to_a

      cluster.stop(mode: :fast)
      5.times do
        answers = assert_elapsed_under(1.0, "answering with PostgreSQL down") { allocate(port, items) }
        assert_equal [["+15550999999", true, "storage_unavailable"]], answers.map { |a| a.values_at("number", "overflow", "reason") }.uniq
        sleep 0.1 # before and after the shard's ownership tick notices
      end
      assert_equal 200, api(port, :get, "/health").first

      cluster.start
      after = wait_until(10, "tracked numbers again") do
        answers = allocate(port, items)
        answers.none? { |a| a["overflow"] } && answers
      end
      tracked = (before + after).map { |a| a["number"] }
      stored = sql(db, "select number from allocations").map { |row| row["number"] }
      assert_equal tracked.sort, stored.sort, "every tracked answer is stored, and nothing else"
      assert_equal tracked.uniq, tracked, "a number locked out before the restart was handed out again"
      # Taken back with the state it had, not reloaded from the table (Allocator#readopt).
      takeovers = api(port, :get, "/health").last["takeovers"]
      assert_equal({ "retained" => 1, "loaded" => 1 }, takeovers, "before the restart: #{before_takeovers}")
      # A new lock session, the same process: its peers keep their breakers and connections
      # to it (FanOut#shards_seen).
      again = sql(db, "select url, pid, process from ringpool_shards").to_a
      assert_equal shards.map { |row| row.values_at("url", "process") }, again.map { |row| row.values_at("url", "process") }
      refute_equal shards.map { |row| row["pid"] }, again.map { |row| row["pid"] }
      refute_empty shards.first["process"]
    end
  ensure
    cluster&.destroy
  end

  # PostgreSQL slower than the deadline: the request is answered at its deadline with overflow
  # numbers, and the INSERT is not cancelled but left to finish; the numbers it stored stay
  # locked out (never handed out, never handed out twice), the pool goes on with the others.
  def test_an_insert_slower_than_the_deadline_answers_overflow_and_finishes_later
    db = fresh_database
    with_shard(db, deadline: 0.3) do |port|
      pool = create_pool(port, count: 4, lockout: 3600)
      blocker = PG.connect(db)
      blocker.exec("begin; lock table allocations in exclusive mode")
      answers = assert_elapsed_under(1.5, "answering past a 0.3 s deadline") do
        allocate(port, [{ "ring_pool" => pool["id"] }, { "ring_pool" => pool["id"] }])
      end
      assert_equal [[true, "storage_unavailable"]] * 2, answers.map { |a| a.values_at("overflow", "reason") }
      blocker.exec("commit")
      late = wait_until(5, "the late INSERT") { (rows = sql(db, "select number from allocations")).size == 2 && rows }
      after = allocate(port, [{ "ring_pool" => pool["id"] }] * 3)
      assert_equal [false, false, true], after.map { |a| a["overflow"] }
      assert_empty after.first(2).map { |a| a["number"] } & late.map { |row| row["number"] }, "a number stored late was handed out"
    ensure
      blocker&.close
    end
  end

  # Two allocators that both adopted the same pool (two owners for a moment) allocate at once:
  # the table refuses the overlapping rows, each allocator reloads and picks again, and no
  # number is stored twice within its lockout nor answered as tracked twice.
  def test_two_owners_never_hand_out_a_number_twice
    db = fresh_database
    answers = []
    with_db(db, limit: 8) do |pool_db|
      store = Ringpool::Store.new(pool_db)
      pool = store.create_pool(name: "contested", numbers: numbers(20), overflow_number: "+15550999999", lockout_seconds: 3600)
      owners = Array.new(2) do
        allocator = Ringpool::Allocator.new(store)
        allocator.adopt(pool, store.numbers_with_lockouts([pool.id]).fetch(pool.id))
        allocator
      end
      tasks = Array.new(8) do |i|
        Weft.spawn { owners[i % 2].allocate(Array.new(3) { Ringpool::Allocator::Item.new(pool, "{}") }) }
      end
      answers = Weft.gather(tasks).flatten
    end
    tracked = answers.select(&:tracked?).map(&:number)
    assert_equal tracked.uniq, tracked, "a number was answered as tracked twice"
    # Each allocator retries a refused pick a bounded number of times, so under contention a few
    # items may end as overflow while numbers are left; never more than the pool holds.
    assert_operator tracked.size, :>=, 12, "both owners together hand out most numbers"
    assert_operator tracked.size, :<=, 20
    assert(answers.reject(&:tracked?).all? { |a| a.overflow? && %w[exhausted shard_unavailable].include?(a.reason) })
    overlapping = sql(db, <<~SQL).first["count"]
      select count(*) from allocations a join allocations b on a.number = b.number and a.ctid < b.ctid and a.lockout && b.lockout
    SQL
    assert_equal "0", overlapping
    assert_equal tracked.sort, sql(db, "select number from allocations").map { |row| row["number"] }.sort
  end
end
