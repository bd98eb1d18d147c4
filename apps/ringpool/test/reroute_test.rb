# frozen_string_literal: true

require_relative "test_helper"

# A pool that moved since the asking shard's last tick: the shard it asked answers not_owner,
# and the item is asked again, once, of the owner PostgreSQL names now, instead of costing the
# caller the overflow number.
class RingpoolRerouteTest < Minitest::Test
  include Ringpool::Test::Helpers

  def setup
    @db = fresh_database
  end

  def test_an_item_whose_pool_moved_is_asked_again_of_its_new_owner
    # Ticks far apart: after its first, no shard re-reads the routes during the test, so nothing
    # but the request corrects the stale route below.
    with_shard(@db, interval: 60) do |entry_port, entry|
      with_shard(@db, interval: 60) do |_, second|
        with_shard(@db, interval: 60) do |third_port, third|
          # The creating shard claims a new pool at once, unless a first tick elsewhere got there
          # first; one the entry shard holds has nothing to route, so make another.
          pool = owner = nil
          5.times do
            pool = create_pool(third_port, count: 3, lockout: 60)
            owner = wait_until(5, "an owner") { [entry, second, third].find { |shard| shard.instance_variable_get(:@allocator).owns?(pool["id"]) } }
            break unless owner.equal?(entry)
          end
          skip "the entry shard took every pool: nothing to route" if owner.equal?(entry)
          former = ([second, third] - [owner]).first
          # The entry shard believes the other shard still has it, as after a move it has not
          # seen yet (reaching into the app's own object: the public API cannot make a route stale).
          # (A first tick still finishing replaces the routes table: read it afresh each time.)
          routes = -> { entry.instance_variable_get(:@ownership).instance_variable_get(:@routes) }
          routes.call[pool["id"]] = former.health["shard"]

          answer = allocate(entry_port, [{ "ring_pool" => pool["id"], "params" => { "try" => 1 } }]).first
          refute answer["overflow"], "the item was not asked again of its new owner: #{answer.inspect}"
          assert_equal owner.health["shard"], routes.call[pool["id"]], "the route was not corrected"
        end
      end
    end
  end
end
