# frozen_string_literal: true

require_relative "test_helper"

# The public API of one shard, end to end over HTTP with PostgreSQL behind it.
class RingpoolAPITest < Minitest::Test
  include Ringpool::Test::Helpers

  def setup
    @db = fresh_database
  end

  def test_exhaustion_two_numbers_then_the_overflow_number
    with_shard(@db) do |port|
      pool = create_pool(port, count: 2, lockout: 3600)
      answers = allocate(port, Array.new(4) { |i| { "ring_pool" => pool["id"], "params" => { "visit" => i } } })
      tracked = answers.first(2)
      assert_equal pool["numbers"].map { |n| n["number"] }.sort, tracked.map { |a| a["number"] }.sort
      assert(tracked.all? { |a| a["overflow"] == false && a["lockout_until"] })
      answers.last(2).each do |answer|
        assert_equal({ "ring_pool" => pool["id"], "number" => "+15550999999", "overflow" => true,
                       "reason" => "exhausted", "lockout_until" => nil }, answer)
      end
      assert_equal %w[exhausted], allocate(port, [{ "ring_pool" => pool["id"] }]).map { |a| a["reason"] }
      assert_equal 2, sql(@db, "select count(*) from allocations").first["count"].to_i
      shown = wait_until(5, "overflow counters written") do
        body = api(port, :get, "/ring_pools/#{pool['id']}").last
        body["overflows"]["exhausted"] == 3 && body
      end
      assert_equal [0, 2, 2], [shown["free"], shown["locked"], shown["allocations"]]
    end
  end

  def test_numbers_rotate_fairly
    with_shard(@db) do |port|
      pool = create_pool(port, count: 3, lockout: 1)
      seen = []
      3.times do
        seen.concat(allocate(port, Array.new(3) { { "ring_pool" => pool["id"] } }).map { |a| a["number"] })
        sleep 1.05 # every lockout ends
      end
      rounds = seen.each_slice(3).to_a
      assert(rounds.all? { |round| round.sort == pool["numbers"].map { |n| n["number"] }.sort }, "each round hands out every number once: #{rounds}")
      assert_equal [rounds.first] * 3, rounds, "the number free the longest goes first, so the order repeats"
    end
  end

  # One number, handed out in two lockout periods with different params: each instant is
  # attributed to the allocation whose lockout covers it.
  def test_attribution_across_lockout_periods
    with_shard(@db) do |port|
      pool = create_pool(port, count: 2, lockout: 1)
      first = allocate(port, [{ "ring_pool" => pool["id"], "params" => { "campaign" => "a" } },
                              { "ring_pool" => pool["id"], "params" => { "campaign" => "b" } }])
      sleep 1.05
      second = allocate(port, [{ "ring_pool" => pool["id"], "params" => { "campaign" => "c" } }]).first
      number = second["number"]
      earlier = first.index { |answer| answer["number"] == number }
      first_end = Time.iso8601(first[earlier]["lockout_until"])
      second_end = Time.iso8601(second["lockout_until"])
      assert_equal({ "campaign" => %w[a b][earlier] }, attribution(port, number, first_end - 0.001))
      assert_equal({ "campaign" => "c" }, attribution(port, number, second_end - 0.5))
      assert_equal 404, attribution_status(port, number, second_end + 1)
      assert_equal 404, attribution_status(port, "+15550999999", Time.now), "overflow numbers are not tracked"
      assert_equal 422, api(port, :get, "/attribution?number=12345").first
      assert_equal 422, api(port, :get, "/attribution?number=%2B15550000001&at=yesterday").first
    end
  end

  def test_bad_input_is_refused_and_nothing_is_stored
    with_shard(@db) do |port|
      pool = create_pool(port, count: 2)
      assert_equal [400, "malformed_json"], error_of(api(port, :post, "/allocations", raw: '{"allocations": ['))
      assert_equal [400, "malformed_json"], error_of(api(port, :post, "/allocations", raw: "\xff\xfe".b))
      assert_equal [422, "invalid_request"], error_of(api(port, :post, "/allocations", [1, 2]))
      assert_equal [422, "invalid_request"], error_of(api(port, :post, "/allocations", { "allocations" => "all" }))
      assert_equal [422, "batch_size"], error_of(api(port, :post, "/allocations", { "allocations" => [] }))
      too_many = Array.new(1_001) { { "ring_pool" => pool["id"] } }
      assert_equal [422, "batch_size"], error_of(api(port, :post, "/allocations", { "allocations" => too_many }))
      assert_equal [413, "too_large"], error_of(api(port, :post, "/allocations", raw: " " * (5 * 1024 * 1024)))

      answers = allocate(port, [
        { "ring_pool" => "#{pool['id']}" },                                    # wrong type
        { "ring_pool" => 987_654 },                                            # unknown
        { "ring_pool" => pool["id"], "params" => { "big" => "x" * 100_000 } }, # 100 KB params
        { "ring_pool" => pool["id"], "params" => [1, 2] },                     # not an object
        { "ring_pool" => pool["id"], "params" => { "nested" => { "a" => 1 } } },
        "not an object"
      ])
      assert_equal %w[invalid_ring_pool unknown_ring_pool params_too_large invalid_params invalid_params invalid_item],
                   answers.map { |a| a["error"] }
      assert(answers.none? { |a| a["number"] })

      bad_pools = [
        { "numbers" => ["+15551234567", "5551234568"], "overflow_number" => "+15550999999", "lockout_seconds" => 60 },
        { "numbers" => ["+15551234567", "+1555123456789012"], "overflow_number" => "+15550999999", "lockout_seconds" => 60 },
        { "numbers" => ["+15551234567"], "overflow_number" => "+15550999999", "lockout_seconds" => 60 },
        { "numbers" => ["+15551234567", "+15551234568"], "overflow_number" => "0800", "lockout_seconds" => 60 },
        { "numbers" => ["+15551234567", "+15551234568"], "overflow_number" => "+15550999999", "lockout_seconds" => "60" },
        { "numbers" => ["+15551234567", "+15551234567"], "overflow_number" => "+15550999999", "lockout_seconds" => 60 }
      ]
      bad_pools.each { |spec| assert_equal 422, api(port, :post, "/ring_pools", spec).first, spec.inspect }
      taken = { "numbers" => [pool["numbers"].first["number"], "+15551234569"], "overflow_number" => "+15550999999", "lockout_seconds" => 60 }
      assert_equal [409, "numbers_taken"], error_of(api(port, :post, "/ring_pools", taken))
      assert_equal [404, "not_found"], error_of(api(port, :get, "/ring_pools/999999"))
      assert_equal 405, api(port, :get, "/allocations").first

      assert_equal "0", sql(@db, "select count(*) from allocations").first["count"]
      assert_equal "1", sql(@db, "select count(*) from ring_pools").first["count"]
    end
  end

  # Strings JSON can carry but PostgreSQL cannot store: NUL (jsonb and text refuse it) and a
  # lone surrogate (Ruby's parser turns "\udc00" into invalid UTF-8, which JSON.generate and
  # PostgreSQL refuse). Params with them failed the whole group's INSERT, so one client's item
  # cost every request in its group a tracked number; a pool name with them was a 500 or a 503.
  def test_text_postgresql_cannot_store_is_refused_per_item
    with_shard(@db) do |port|
      pool = create_pool(port, count: 2)
      id = pool["id"]
      bad = ['{"a":"x\\u0000y"}', '{"k\\u0000":1}', '{"a":"x\\udc00"}', '{"\\udc00":1}']
      items = bad.map { |params| %({"ring_pool":#{id},"params":#{params}}) } << %({"ring_pool":#{id},"params":{"ok":"caf\\u00e9"}})
      status, body = api(port, :post, "/allocations", raw: %({"allocations":[#{items.join(',')}]}))
      assert_equal 200, status, body.inspect
      answers = body["allocations"]
      assert_equal ["invalid_params"] * 4, answers.first(4).map { |a| a["error"] }, answers.inspect
      assert_equal false, answers.last["overflow"], "the good item of the same batch (the same INSERT) is tracked: #{answers.last.inspect}"
      assert_equal [{ "params" => '{"ok": "café"}' }], sql(@db, "select params::text from allocations")

      lone = %({"numbers":["+1555\\udc00","+15551234567"],"overflow_number":"+15550999999","lockout_seconds":60})
      assert_equal [422, "invalid_numbers"], error_of(api(port, :post, "/ring_pools", raw: lone))
      ['"a\\u0000b"', '"a\\udc00b"'].each do |name|
        spec = %({"numbers":#{JSON.generate(numbers(2))},"overflow_number":"+15550999999","lockout_seconds":60,"name":#{name}})
        assert_equal [422, "invalid_name"], error_of(api(port, :post, "/ring_pools", raw: spec)), name
      end
    end
  end

  # A number is tracked in one pool or an overflow number, never both: a pool whose overflow
  # number was another pool's tracked number handed it out during that pool's lockouts, and
  # the calls it got were attributed to the params of whoever the other pool had given it to.
  def test_an_overflow_number_is_never_a_tracked_number
    with_shard(@db) do |port|
      pool = create_pool(port, count: 2, overflow: "+15550999999")
      tracked = pool["numbers"].first["number"]
      overflow_is_tracked = { "numbers" => numbers(2), "overflow_number" => tracked, "lockout_seconds" => 60 }
      assert_equal [409, "numbers_taken"], error_of(api(port, :post, "/ring_pools", overflow_is_tracked))
      tracks_an_overflow = { "numbers" => [*numbers(1), "+15550999999"], "overflow_number" => "+15550888888", "lockout_seconds" => 60 }
      assert_equal [409, "numbers_taken"], error_of(api(port, :post, "/ring_pools", tracks_an_overflow))
      shared_overflow = { "numbers" => numbers(2), "overflow_number" => "+15550999999", "lockout_seconds" => 60 }
      assert_equal 201, api(port, :post, "/ring_pools", shared_overflow).first, "pools may share an overflow number"
      assert_equal "2", sql(@db, "select count(*) from ring_pools").first["count"]
    end
  end

  def test_malformed_ids_and_queries_get_a_4xx
    with_shard(@db) do |port|
      assert_equal [404, "not_found"], error_of(api(port, :get, "/ring_pools/9999999999")), "past PostgreSQL's integer"
      assert_equal [400, "malformed_query"], error_of(api(port, :get, "/attribution?number=%ZZ"))
      status, body = api(port, :get, "/attribution?number=+15550000001")
      assert_equal 422, status
      assert_includes body["message"], "%2B", "a bare + reads as a space: the answer says how to write it"
      assert_equal [422, "invalid_number"], error_of(api(port, :get, "/attribution?number=%2B1555%FF"))
      assert_equal [422, "invalid_at"], error_of(api(port, :get, "/attribution?number=%2B15550000001&at=0000-01-01T00:00:00Z"))
      assert_equal [422, "invalid_at"], error_of(api(port, :get, "/attribution?number=%2B15550000001&at=0001-01-01T00:00:00%2B01:00"))
      assert_equal [422, "invalid_at"], error_of(api(port, :get, "/attribution?number=%2B15550000001&at=9999-12-31T23:00:00-01:00"))
      assert_equal [422, "invalid_at"], error_of(api(port, :get, "/attribution?number=%2B15550000001&at=2024%FF"))
      assert_equal [422, "invalid_at"], error_of(api(port, :get, "/attribution?number=%2B15550000001&at=2023-02-29T12:00:00Z")), "no such day"
      assert_equal 404, api(port, :get, "/attribution?number=%2B15550000001&at=0001-01-01T00:00:00Z").first
      assert_equal 404, api(port, :get, "/attribution?number=%2B15550000001&at=9999-12-31T23:59:59.999999Z").first
    end
  end

  private

  def attribution_path(number, at)
    "/attribution?number=#{CGI.escape(number)}&at=#{CGI.escape(at.utc.iso8601(6))}"
  end

  def attribution(port, number, at)
    status, body = api(port, :get, attribution_path(number, at))
    assert_equal 200, status, body.inspect
    body["params"]
  end

  def attribution_status(port, number, at)
    api(port, :get, attribution_path(number, at)).first
  end

  def error_of(response)
    status, body = response
    [status, body.is_a?(Hash) ? body["error"] : body]
  end
end
