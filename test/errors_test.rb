# frozen_string_literal: true

require_relative "test_helper"
require "weft/server"
require "weft/server/cli"
require "weft/server/cluster"
require "weft/server/launcher"
require "weft/postgres"
require "weft/http"
require "weft/http/faraday"
require "weft/resilience"
require "weft/resilience/faraday"
require "active_record/connection_adapters/weft_postgresql_adapter"
require "sequel"
require "sequel/adapters/weft_postgres"

# Every error Weft raises can be rescued as Weft::Error. The class list is found, not written
# down: a new exception class that forgets `include Weft::Error` fails here.
class ErrorsTest < Minitest::Test
  LIB = "#{File.expand_path('../lib', __dir__)}/".freeze

  # Exception classes under Weft that are deliberately not Weft::Errors, and why.
  OUTSIDE = {
    "Weft::Cancelled" => "stopping is not failing: `rescue Weft::Error` must not swallow a cancellation",
    "Weft::HTTP::Budget::Expired" => "private signal of one timer, rescued where it is raised",
    "Weft::Resilience::CompletionQueue::Expired" => "private signal of one timer, rescued where it is raised"
  }.freeze

  # @return [Array<Class>] the exception classes defined in lib/ and loaded above, Weft's own
  #   and those of its framework glue (under ActiveRecord:: and Sequel::)
  def weft_exceptions
    ObjectSpace.each_object(Class).select do |klass|
      next false unless klass < Exception && klass.name&.match?(/\A[A-Z]/)
      file, = Object.const_source_location(klass.name)
      file.is_a?(String) && file.start_with?(LIB)
    end
  end

  def test_every_exception_class_in_lib_is_a_weft_error
    found = weft_exceptions
    assert_operator found.size, :>=, 40, "the enumeration lost classes: #{found.map(&:name).sort}"
    missing = found.reject { |klass| klass <= Weft::Error || OUTSIDE.key?(klass.name) }
    assert_empty missing.map(&:name).sort, "include Weft::Error in these (or list them in OUTSIDE, with the reason)"
  end

  def test_the_exceptions_left_outside_exist_and_stay_outside
    OUTSIDE.each_key do |name|
      klass = Object.const_get(name)
      refute klass <= StandardError, "#{name} should not be a StandardError"
      refute klass <= Weft::Error, "#{name} should not be a Weft::Error"
    end
  end

  # The files the requires above do not load must not define exception classes the enumeration
  # cannot see.
  def test_files_not_loaded_here_define_no_exception_classes
    unloaded = Dir["#{LIB}**/*.rb"].reject { |file| $LOADED_FEATURES.include?(file) }
    offenders = unloaded.select { |file| File.read(file).match?(/^\s*class \w+ < [\w:]*(Error|Exception|Timeout)\b/) }
    assert_empty offenders, "load these in this test so their exception classes are checked"
  end

  def test_weft_error_is_a_module_so_ancestry_can_differ
    assert_instance_of Module, Weft::Error
    assert_raises(TypeError) { raise Weft::Error, "a module cannot be raised" }
    error = assert_raises(Weft::Error) { raise Weft::UsageError, "misuse" }
    assert_kind_of StandardError, error
  end

  def test_every_pool_timeout_is_a_weft_timeout_error_and_a_timeout_error
    [Weft::Pool::TimeoutError, Weft::HTTP::PoolTimeout, Weft::Postgres::PoolTimeout].each do |klass|
      assert_operator klass, :<, Weft::TimeoutError
      assert_operator klass, :<, Timeout::Error
      assert_operator klass, :<, Weft::Error
    end
    assert_operator Weft::Postgres::PoolTimeout, :<, Weft::Postgres::Error
    assert_operator Weft::HTTP::PoolTimeout, :<, Weft::HTTP::Error
  end

  def test_deadline_errors_are_timeout_errors
    [Weft::DeadlineExceeded, Weft::HTTP::DeadlineExceeded].each do |klass|
      assert_operator klass, :<=, Weft::DeadlineExceeded
      assert_operator klass, :<, Timeout::Error
      assert_operator klass, :<, Weft::Error
    end
  end

  def test_component_families_keep_their_superclasses
    assert_operator Weft::Postgres::ConnectionError, :<, PG::ConnectionBad
    assert_operator Weft::Postgres::ConnectionError, :<, Weft::Postgres::Error
    assert_operator Weft::Server::Config::Invalid, :<, ArgumentError
    assert_operator Weft::Server::BindAddress::Invalid, :<, ArgumentError
    assert_operator Weft::HTTP::ReadTimeout, :<, Weft::HTTP::TimeoutError
    assert_operator Weft::CircuitOpen, :<, Weft::Rejected
    [Weft::HTTP1::ParseError, Weft::Server::Connection::ClientGone, Weft::Server::Connection::ClientTimeout,
     Weft::Server::RequestBody::TooLarge, Weft::Server::ResponseWriter::InvalidResponse,
     Weft::HTTP::MalformedResponse, Weft::HTTP::BodyTooLarge, Weft::Rejected].each do |klass|
      assert_equal StandardError, klass.superclass, klass.name
    end
  end

  def test_cancellation_is_not_caught_as_a_weft_error
    caught = nil
    Weft.run do
      task = Weft.spawn do
        sleep 5
      rescue Weft::Error => e
        caught = e
      end
      sleep 0.01
      task.cancel
      task.wait
      assert_predicate task, :cancelled?
    end
    assert_nil caught
  end

  def test_errors_raised_by_weft_are_rescued_as_weft_errors
    assert_raises(Weft::Error) { Weft::Promise.new.tap { |promise| promise.fulfill(1) }.fulfill(2) }
    pool = Weft::Pool.new(limit: 1) { Object.new }
    pool.checkout
    assert_raises(Weft::Error) { pool.checkout(acquire_timeout: 0.01) }
    parser = Weft::HTTP1::RequestParser.new
    assert_raises(Weft::Error) { parser.parse("BAD\0 / HTTP/1.1\r\n\r\n".b, {}) }
  end
end
