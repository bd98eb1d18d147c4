# frozen_string_literal: true

require_relative "test_helper"
require "weft/readiness"
require "tempfile"

# Weft::Readiness over real sockets: one-shot readability notification with no fiber per IO.
class ReadinessTest < Minitest::Test
  def setup
    skip "Weft::Readiness needs epoll (Linux)" unless Weft::Readiness.available?
    @readiness = Weft::Readiness.new
    @pairs = []
  end

  def teardown
    @readiness&.close
    @pairs.flatten.each { |socket| socket.close unless socket.closed? }
  end

  def test_a_socket_is_reported_with_its_value_once_written_to
    watched, peer = pair
    @readiness.register(watched, :first)
    assert_equal [], @readiness.collect, "reported before anything was written"
    refute @readiness.to_io.wait_readable(0.05), "the descriptor is readable with nothing ready"
    peer.write("x")
    assert @readiness.to_io.wait_readable(1), "the descriptor did not become readable"
    assert_equal [:first], @readiness.collect
    assert_equal [], @readiness.collect, "reported twice"
  end

  def test_the_value_defaults_to_the_io
    watched, peer = pair
    @readiness.register(watched)
    peer.write("x")
    assert_equal [watched], @readiness.collect
  end

  def test_a_registration_fires_once_until_registered_again
    watched, peer = pair
    @readiness.register(watched, :conn)
    peer.write("a")
    assert_equal [:conn], @readiness.collect
    peer.write("b") # still unread, and more arrives: no second report
    refute @readiness.to_io.wait_readable(0.05)
    assert_equal [], @readiness.collect
    @readiness.register(watched, :again) # re-armed with unread bytes: fires at once
    assert_equal [:again], @readiness.collect
  end

  def test_a_peer_hanging_up_is_reported
    watched, peer = pair
    @readiness.register(watched, :conn)
    peer.close
    assert @readiness.to_io.wait_readable(1)
    assert_equal [:conn], @readiness.collect
  end

  def test_deregister_stops_watching
    watched, peer = pair
    @readiness.register(watched, :conn)
    assert @readiness.deregister(watched), "a pending registration"
    peer.write("x")
    refute @readiness.to_io.wait_readable(0.05)
    assert_equal [], @readiness.collect
    refute @readiness.deregister(watched), "deregistered twice"
    @readiness.register(watched, :back) # after DEL, registering adds it anew
    assert_equal [:back], @readiness.collect
    refute @readiness.deregister(watched), "already collected"
  end

  # More than one epoll_wait batch (256) ready at once: one #collect returns them all.
  def test_many_sockets_ready_at_once_are_collected_in_one_call
    pairs = Array.new(700) { pair }
    pairs.each_with_index { |(watched, _), index| @readiness.register(watched, index) }
    written = (0...700).step(2).to_a + [699]
    written.each { |index| pairs[index][1].write("x") }
    assert_equal written.sort, @readiness.collect.sort
    assert_equal [], @readiness.collect
  end

  def test_a_closed_socket_is_forgotten_and_its_descriptor_number_can_be_registered_again
    watched, peer = pair
    number = watched.fileno
    @readiness.register(watched, :old)
    watched.close
    refute @readiness.deregister(watched), "a closed IO is not watched any more"
    peer.write("x") rescue nil # rubocop:disable Style/RescueModifier
    assert_equal [], @readiness.collect, "a closed descriptor was reported"
    assert_raises(IOError) { @readiness.register(watched, :closed) }

    reused, reused_peer = pair # the lowest free descriptor: the number just closed
    assert_equal number, reused.fileno, "the test needs the descriptor number reused"
    @readiness.register(reused, :new)
    reused_peer.write("y")
    assert_equal [:new], @readiness.collect
  end

  def test_an_io_epoll_cannot_watch_is_refused
    Tempfile.create("readiness") do |file|
      assert_raises(Errno::EPERM) { @readiness.register(file, :file) }
    end
    assert_raises(ArgumentError) { @readiness.register(pair.first, nil) }
    assert_raises(TypeError) { @readiness.register(42, :number) }
  end

  def test_close_is_idempotent_and_later_calls_raise
    refute @readiness.closed?
    @readiness.close
    @readiness.close
    assert @readiness.closed?
    assert_raises(IOError) { @readiness.collect }
    assert_raises(IOError) { @readiness.register(pair.first, :late) }
  end

  # The point of it: many sockets, one fiber waiting for all of them through the reactor.
  def test_one_fiber_in_the_reactor_waits_for_all_the_sockets
    pairs = Array.new(50) { pair }
    pairs.each_with_index { |(watched, _), index| @readiness.register(watched, index) }
    woken = []
    Weft.run do
      Weft.spawn do
        until woken.size == 2
          @readiness.to_io.wait_readable
          woken.concat(@readiness.collect)
        end
      end
      Weft.spawn do
        sleep 0.02
        pairs[7][1].write("x")
        sleep 0.02
        pairs[42][1].write("y")
      end
    end
    assert_equal [7, 42], woken
  end

  private

  def pair
    UNIXSocket.pair.tap { |sockets| @pairs << sockets }
  end
end
