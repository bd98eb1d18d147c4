# frozen_string_literal: true

require_relative "../test_helper"
require_relative "support/server_helpers"

# Rails, Sinatra and Roda apps served by Weft, each wrapped in Rack::Lint.
class ServerFrameworksTest < Minitest::Test
  include Weft::Test::ServerHelpers

  def test_rails
    require "action_controller/railtie"
    app = rails_app
    with_server(app) do |_, port|
      response = http_get(port, "/hello?name=rails")
      assert_equal "200", response.code
      assert_equal "hello rails", response.body
      response = Net::HTTP.start("127.0.0.1", port) { |http| http.post("/echo", "payload=42", "Content-Type" => "application/x-www-form-urlencoded") }
      assert_equal "42", response.body
      assert_equal "404", http_get(port, "/missing").code
    end
  end

  def test_sinatra
    require "sinatra/base"
    app = Class.new(Sinatra::Base) do
      set :host_authorization, { permitted_hosts: [] }
      get("/hello/:name") { "hello #{params[:name]}" }
      post("/echo") { request.body.read.upcase }
      get("/stream") { stream { |out| out << "a" << "b" } }
    end
    with_server(app) do |_, port|
      assert_equal "hello sinatra", http_get(port, "/hello/sinatra").body
      assert_equal "ABC", Net::HTTP.start("127.0.0.1", port) { |http| http.post("/echo", "abc", "Content-Type" => "text/plain") }.body
      assert_equal "ab", http_get(port, "/stream").body
    end
  end

  def test_roda
    require "roda"
    app = Class.new(Roda) do
      route do |r|
        r.get("hello", String) { |name| "hello #{name}" }
        r.post("echo") { r.body.read.reverse }
      end
    end
    with_server(app.freeze.app) do |_, port|
      assert_equal "hello roda", http_get(port, "/hello/roda").body
      assert_equal "cba", Net::HTTP.start("127.0.0.1", port) { |http| http.post("/echo", "abc") }.body
      assert_equal "404", http_get(port, "/nope").code
    end
  end

  private

  def rails_app
    return self.class.const_get(:RailsApp) if self.class.const_defined?(:RailsApp, false)
    application = Class.new(Rails::Application) do
      config.eager_load = false
      config.secret_key_base = "x" * 64
      config.logger = Logger.new(nil)
      config.hosts.clear
      # Rails 7.2 warns unless an app opts in to the zone-preserving #to_time; 8.1 always
      # preserves it and deprecates the setting.
      config.active_support.to_time_preserves_timezone = :zone if Rails.gem_version < Gem::Version.new("8.1")
      # Rails 7.1 (bin/test's Rails 7.1 step) warns about its default cache format, 6.1.
      config.active_support.cache_format_version = 7.1 if Rails.gem_version < Gem::Version.new("7.2")
    end
    self.class.const_set(:RailsApp, application)
    controller = Class.new(ActionController::Base) do
      protect_from_forgery with: :null_session
      def hello = render(plain: "hello #{params[:name]}")
      def echo = render(plain: params[:payload])
    end
    self.class.const_set(:HelloController, controller)
    application.initialize!
    application.routes.draw do
      get "/hello" => "server_frameworks_test/hello#hello"
      post "/echo" => "server_frameworks_test/hello#echo"
    end
    application
  end
end
