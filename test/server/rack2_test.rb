# frozen_string_literal: true

require_relative "../test_helper"
require_relative "support/server_helpers"
require_relative "support/process_helpers"
require "tmpdir"

# The Rack 2 gem itself (2.2, from the separate bundle in test/server/rack2/) running an app
# through `rackup -s weft -E none` (Rack 2's handler registry: lib/rack/handler/weft.rb), with
# Rack 2's Rack::Lint, and Rack::Chunked in one of the two runs.
class ServerRack2Test < Minitest::Test
  include Weft::Test::ServerHelpers
  include Weft::Test::ProcessHelpers

  GEMFILE = File.expand_path("rack2/Gemfile", __dir__)

  def rack2_env
    { "BUNDLE_GEMFILE" => GEMFILE, "BUNDLE_PATH" => File.join(ROOT, "vendor/bundle"), "RUBYOPT" => nil,
      "BUNDLER_SETUP" => nil, "BUNDLE_BIN_PATH" => nil }
  end

  def setup
    @env = rack2_env
    ok = Bundler.with_unbundled_env { system(@env, "bundle", "check", out: File::NULL, err: File::NULL) }
    ok ||= Bundler.with_unbundled_env { system(@env, "bundle", "install", "--quiet", out: File::NULL, err: File::NULL) }
    skip "the Rack 2 bundle is not installed: BUNDLE_GEMFILE=#{GEMFILE} BUNDLE_PATH=vendor/bundle bundle install" unless ok
  end

  def test_rack2_app_with_rack2_lint_and_handler
    Dir.mktmpdir do |dir|
      closed = File.join(dir, "closed")
      %w[plain chunked].each do |mode|
        port = free_tcp_port
        env = @env.merge("WEFT_TEST_CLOSED" => closed, "WEFT_TEST_CHUNKED" => mode == "chunked" ? "1" : nil)
        pid = Bundler.with_unbundled_env do
          Process.spawn(env, "bundle", "exec", "ruby", "-I", File.join(ROOT, "lib"), "-S", "rackup", "-s", "weft",
                        "-E", "none", "-p", port.to_s, "-o", "127.0.0.1", File.join(FIXTURES, "rack2.ru"),
                        chdir: ROOT, out: File::NULL, err: File::NULL, pgroup: true)
        end
        begin
          wait_for_port(port, pid)
          response = Net::HTTP.start("127.0.0.1", port) { |http| http.get("/") }
          assert_match(/\Arack 2\.2\./, response.body, mode)
          assert_equal ["a=1", "b=2"], response.get_fields("set-cookie"), mode
          socket = connect(port)
          socket.write("GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")
          streamed = read_response(socket)
          assert_equal "abc", streamed.body, mode
          # Chunked by Weft ("plain") or by Rack 2's Rack::Chunked and passed through ("chunked").
          assert_equal "chunked", streamed["transfer-encoding"], mode
          assert_equal 1, streamed.raw.scan(/^transfer-encoding:/i).size, streamed.raw
          socket.write("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello") # same connection
          assert_equal "hello", read_response(socket).body, mode
          assert_equal "closed", eventually(5, "body.close") { File.exist?(closed) && File.read(closed) }
          File.delete(closed)
          # Rack 2's full hijack reads the socket from rack.hijack_io (Rack::Lint refused a
          # hijack without it: "rack.hijack_io must respond to read").
          upgraded = connect(port)
          upgraded.write("GET /upgrade HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
          assert_equal 101, Timeout.timeout(5) { read_response(upgraded, head_request: true) }.status, mode
          assert_equal "hijacked", Timeout.timeout(5) { upgraded.read }, mode
          upgraded.close
        ensure
          stop_process(pid)
        end
      end
    end
  end
end
