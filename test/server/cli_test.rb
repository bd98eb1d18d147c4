# frozen_string_literal: true

require_relative "../test_helper"
require_relative "support/server_helpers"
require_relative "support/process_helpers"
require_relative "../support/certificates"
require "openssl"
require "tmpdir"
require "English"
require "weft/server/cli"

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
      certs = Weft::Test::Certificates.generate(dir)
      cert = certs[:cert_file]
      key = certs[:key_file]
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

  # Each bad value, by option: [arguments, what the error line must contain].
  BAD_OPTIONS = {
    "--port" => [[%w[-p 80000], "--port 80000"], [%w[-p -5], "--port -5"], [%w[--port abc], "--port abc"]],
    "--host" => [[%w[-o nohost.invalid], "--host nohost.invalid"]],
    "--bind" => [[%w[-b tcp://nohost.invalid:1], "--bind tcp://nohost.invalid:1"],
                 [%w[-b tcp://127.0.0.1:70000], "--bind tcp://127.0.0.1:70000"],
                 [%w[-b unix:///nonexistent-dir/weft.sock], "--bind unix:///nonexistent-dir/weft.sock"],
                 [%w[-b ssl://127.0.0.1:0], "--bind ssl://127.0.0.1:0"],
                 [%w[-b ftp://127.0.0.1:21], "--bind ftp://127.0.0.1:21"]],
    "--workers" => [[%w[-w -1], "--workers -1"], [%w[-w two], "-w two"]],
    "--config" => [[%w[-C /nonexistent-dir/weft.rb], "--config /nonexistent-dir/weft.rb"]],
    "--preload" => [[%w[--preload=yes], "--preload"]],
    "--environment" => [[["-E", ""], "--environment"]],
    "--access-log" => [[%w[--access-log /nonexistent-dir/access.log], "--access-log /nonexistent-dir/access.log"]],
    "--stats-path" => [[%w[--stats-path stats], "--stats-path stats"]],
    "--metrics-path" => [[%w[--metrics-path metrics], "--metrics-path metrics"]],
    "--max-connections" => [[%w[--max-connections 0], "--max-connections 0"]],
    "--idle-timeout" => [[%w[--idle-timeout 0], "--idle-timeout 0"], [%w[--idle-timeout 1e999], "--idle-timeout"]],
    "--shutdown-timeout" => [[%w[--shutdown-timeout -1], "--shutdown-timeout -1"]],
    "--drain-grace" => [[%w[--drain-grace -1], "--drain-grace -1"]],
    "--worker-timeout" => [[%w[--worker-timeout 0], "--worker-timeout 0"]],
    "--worker-heap-free" => [[%w[--worker-heap-free 0.9], "--worker-heap-free 0.9"], [%w[--worker-heap-free -0.1], "--worker-heap-free -0.1"]],
    "--stall-threshold" => [[%w[--stall-threshold -2], "--stall-threshold -2"]],
    "--request-deadline" => [[%w[--request-deadline 0], "--request-deadline 0"], [%w[--request-deadline soon], "--request-deadline soon"]],
    "--pidfile" => [[%w[--pidfile /nonexistent-dir/weft.pid], "--pidfile /nonexistent-dir/weft.pid"]],
    "--tag" => [[["--tag", "two\nlines"], "--tag"]],
    "--quiet" => [[%w[--quiet=yes], "--quiet"]],
    "RACKUP_FILE" => [[%w[/nonexistent.ru], "/nonexistent.ru"], [%w[a.ru b.ru], "b.ru"]],
    "unknown" => [[%w[--bogus], "--bogus"]]
  }.freeze

  # Every option with a bad value: status 2 and one line on stderr naming it, before anything
  # is bound. Each run also asks for a port the test holds: had weft bound anything before
  # checking the bad value, it would fail on that port instead ("Address already in use").
  # The table runs in this process (a weft process takes ~0.5 s to start); a few cases run
  # through exe/weft too, for the real exit status.
  def test_bad_option_values_exit_2_with_one_line_before_binding
    help = capture_stderr_and_stdout { Weft::Server::CLI.new(["help"]).run }.last
    options = help.scan(/--[a-z-]+/).uniq - ["--help"]
    refute_empty options
    assert_empty options - BAD_OPTIONS.keys, "options without a bad-value case"

    with_held_port do |port|
      BAD_OPTIONS.values.flatten(1).each do |args, named|
        status, err = capture_stderr_and_stdout { Weft::Server::CLI.new(["serve", *args, "-b", "tcp://127.0.0.1:#{port}"]).run }
        assert_one_line_error(args, named, status, err)
      end
      cases = [[%w[-p 80000], "--port 80000"], [%w[-b tcp://nohost.invalid:1], "--bind"], [%w[--max-connections 0], "--max-connections 0"]]
      cases.map { |args, _| Thread.new { run_weft(*args, "-b", "tcp://127.0.0.1:#{port}") } }.map(&:value).each_with_index do |(status, err), index|
        assert_one_line_error(*cases[index], status, err)
      end
    end
  end

  def test_bad_config_file_value_exits_2_naming_file_line_and_setting
    Dir.mktmpdir do |dir|
      path = File.join(dir, "weft.rb")
      File.write(path, "workers 1\nmax_connections 0\n")
      status, err = run_weft(File.join(FIXTURES, "pid.ru"), "-C", path)
      assert_equal 2, status
      assert_equal "weft: #{path}:2: max_connections 0: must be an integer of at least 1\n", err
    end
  end

  def test_help_and_version
    assert_match(/Usage: weft serve/, IO.popen([RbConfig.ruby, File.join(ROOT, "exe/weft"), "help"], &:read))
    assert_equal "weft #{Weft::VERSION}\n", IO.popen([RbConfig.ruby, File.join(ROOT, "exe/weft"), "version"], &:read)
  end

  private

  def assert_one_line_error(args, named, status, err)
    command = "weft serve #{args.join(' ')}"
    assert_equal 2, status, "#{command}: exit status (stderr: #{err})"
    assert_equal 1, err.lines.size, "#{command}: one line on stderr, got #{err.inspect}"
    assert_includes err, named, "#{command}: the line names the option"
    refute_match(/in use|cannot bind/, err, "#{command}: something was bound before the check")
  end

  # Holds a listening port for the block.
  def with_held_port
    held = TCPServer.new("127.0.0.1", 0)
    yield held.addr[1]
  ensure
    held&.close
  end

  # @return [Array(Object, String)] the block's value and what it wrote to $stderr and $stdout
  def capture_stderr_and_stdout
    out = StringIO.new
    previous = [$stderr, $stdout]
    $stderr = $stdout = out
    [yield, out.string]
  ensure
    $stderr, $stdout = previous
  end

  # Runs `weft serve ARGS`, killed if still running after 20 s.
  # @return [Array(Integer, String)] exit status and stderr
  def run_weft(*args)
    err_reader, err_writer = IO.pipe
    pid = Process.spawn(RbConfig.ruby, File.join(ROOT, "exe/weft"), "serve", *args,
                        chdir: ROOT, out: File::NULL, err: err_writer, pgroup: true)
    err_writer.close
    stderr = Thread.new { err_reader.read }
    deadline = Weft::Timers.now + 20
    until (_, status = Process.waitpid2(pid, Process::WNOHANG))
      if Weft::Timers.now > deadline
        Process.kill("KILL", -pid)
        _, status = Process.waitpid2(pid)
        break
      end
      sleep 0.02
    end
    [status.exitstatus || status.termsig && -status.termsig, stderr.value]
  ensure
    err_reader&.close
  end
end
