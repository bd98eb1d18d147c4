# frozen_string_literal: true

require_relative "../test_helper"
require_relative "support/server_helpers"
require_relative "support/process_helpers"
require "openssl"
require "tmpdir"
require "English"

# `weft serve` options, the config file DSL, unix:// and ssl:// binds, and `rackup -s weft`.
class ServerCLITest < Minitest::Test
  include Weft::Test::ServerHelpers
  include Weft::Test::ProcessHelpers

  def test_config_file_with_binds_hooks_and_a_unix_socket
    Dir.mktmpdir do |dir|
      port = free_tcp_port
      socket_path = File.join(dir, "weft.sock")
      marker = File.join(dir, "booted")
      File.write(File.join(dir, "weft.rb"), <<~RUBY)
        bind "tcp://127.0.0.1:#{port}"
        bind "unix://#{socket_path}"
        workers 1
        idle_timeout 5
        stats_path "/stats"
        after_worker_boot { |index| File.write(#{marker.inspect}, "worker \#{index}") }
      RUBY
      with_weft(File.join(FIXTURES, "pid.ru"), "--config", File.join(dir, "weft.rb"), port: port) do
        assert_match(/\A\d+\z/, get_body(port))
        assert_equal "worker 0", eventually(5, "after_worker_boot hook") { File.exist?(marker) && File.read(marker) }
        unix = UNIXSocket.new(socket_path)
        unix.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert_equal 200, read_response(unix).status
        stats = JSON.parse(get_body(port, "/stats"))
        assert_equal 1, stats["workers"].size
      end
      refute File.exist?(socket_path), "the unix socket file was left behind"
    end
  end

  def test_ssl_bind
    Dir.mktmpdir do |dir|
      cert, key = self_signed(dir)
      app = ->(env) { [200, {}, [env["rack.url_scheme"]]] }
      with_server(app, binds: ["ssl://127.0.0.1:0?cert=#{cert}&key=#{key}"]) do |_, port|
        http = Net::HTTP.new("127.0.0.1", port)
        http.use_ssl = true
        http.verify_mode = OpenSSL::SSL::VERIFY_NONE
        http.start do
          assert_equal "https", http.get("/").body
          assert_equal "https", http.get("/again").body # keep-alive over TLS
        end
      end
    end
  end

  def test_rackup_handler
    port = free_tcp_port
    rackup = Gem.bin_path("rackup", "rackup")
    # -E none: the fixture has its own Rack::Lint, and rackup's development stack would wrap it
    # in a second one (two nested Rack 3.2 Lints with ContentLength between them conflict).
    pid = Process.spawn(RbConfig.ruby, "-I", File.join(ROOT, "lib"), rackup, "-s", "weft", "-E", "none", "-p", port.to_s, "-o", "127.0.0.1",
                        File.join(FIXTURES, "pid.ru"), chdir: ROOT, out: File::NULL, err: File::NULL, pgroup: true)
    wait_for_port(port, pid)
    assert_equal pid.to_s, get_body(port) # a single process, as rackup users expect
  ensure
    stop_process(pid) if pid
  end

  def test_bad_options_exit_with_usage
    output = IO.popen([RbConfig.ruby, File.join(ROOT, "exe/weft"), "serve", "--bogus", err: %i[child out]], &:read)
    assert_match(/invalid option: --bogus/, output)
    assert_match(/Usage: weft serve/, output)
    output = IO.popen([RbConfig.ruby, File.join(ROOT, "exe/weft"), "serve", "/nonexistent.ru", err: %i[child out]], &:read)
    assert_match(/no Rack app: \/nonexistent.ru not found/, output)
    refute $CHILD_STATUS.success?
    assert_equal "weft #{Weft::VERSION}\n", IO.popen([RbConfig.ruby, File.join(ROOT, "exe/weft"), "version"], &:read)
  end

  def test_invalid_timeouts_fail_at_startup_with_one_line
    output = IO.popen([RbConfig.ruby, File.join(ROOT, "exe/weft"), "serve", "--worker-timeout", "0", File.join(FIXTURES, "pid.ru"),
                       err: %i[child out]], &:read)
    refute $CHILD_STATUS.success?
    assert_equal "weft: worker_timeout must be a positive number of seconds, got 0.0", output.lines.first.chomp
    Dir.mktmpdir do |dir|
      File.write(File.join(dir, "weft.rb"), "stall_threshold(-1)\n")
      error = assert_raises(ArgumentError) { Weft::Server::Config.new.load_file(File.join(dir, "weft.rb")) }
      assert_equal "stall_threshold must be a positive number of seconds, got -1", error.message
    end
    error = assert_raises(ArgumentError) { Weft::Server::Config.new(drain_grace: "1") }
    assert_equal 'drain_grace must be a number of seconds >= 0, got "1"', error.message
    assert_equal 0, Weft::Server::Config.new(drain_grace: 0)[:drain_grace]
  end

  private

  def self_signed(dir)
    key = OpenSSL::PKey::RSA.new(2048)
    cert = OpenSSL::X509::Certificate.new
    cert.version = 2
    cert.serial = 1
    cert.subject = cert.issuer = OpenSSL::X509::Name.parse("/CN=localhost")
    cert.public_key = key.public_key
    cert.not_before = Time.now - 60
    cert.not_after = Time.now + 3600
    cert.sign(key, OpenSSL::Digest.new("SHA256"))
    File.write(File.join(dir, "cert.pem"), cert.to_pem)
    File.write(File.join(dir, "key.pem"), key.to_pem)
    [File.join(dir, "cert.pem"), File.join(dir, "key.pem")]
  end
end
