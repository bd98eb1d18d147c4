# frozen_string_literal: true

require_relative "test_helper"
require "ringpool/gc_environment"

# The GC settings the launchers give ringpool's server, per Ruby.
class RingpoolGCEnvironmentTest < Minitest::Test
  def test_the_settings_follow_the_ruby_and_give_way_to_the_environment
    assert_equal({ "RUBY_GC_HEAP_2_INIT_SLOTS" => "150000" }, Ringpool::GCEnvironment.for({}, ruby_version: "3.3.8"))
    assert_equal({ "RUBY_GC_HEAP_INIT_SLOTS" => "800000" }, Ringpool::GCEnvironment.for({}, ruby_version: "3.1.2"))
    assert_equal({}, Ringpool::GCEnvironment.for({}, ruby_version: "3.4.1"), "not measured there")
    assert_equal({}, Ringpool::GCEnvironment.for({ "RUBY_GC_HEAP_2_INIT_SLOTS" => "9" }, ruby_version: "3.3.8"))
    assert_equal({}, Ringpool::GCEnvironment.for({ "RINGPOOL_GC_ROOM" => "0" }, ruby_version: "3.3.8"))
  end

  # What a shard's Ruby makes of it: the pool's floor, as Ruby reports it.
  def test_ruby_takes_the_setting
    skip "Ruby 3.3 only" unless RUBY_VERSION.start_with?("3.3.")
    env = Ringpool::GCEnvironment.for({}).merge("RUBY_YJIT_ENABLE" => "0")
    output = IO.popen(env, [RbConfig.ruby, "-e", "h = GC.stat_heap(2); print h[:heap_eden_slots] + h[:heap_allocatable_pages] * (GC::INTERNAL_CONSTANTS[:HEAP_PAGE_SIZE] / h[:slot_size])"], &:read)
    assert_operator Integer(output), :>=, 150_000
  end
end
