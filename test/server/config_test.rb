# frozen_string_literal: true

require_relative "../test_helper"
require "weft/server"
require "tmpdir"

# Every setting's value is checked as it enters a Config: constructor options and the weft.rb
# DSL, each refused in one line naming the setting (and the file and line).
class ServerConfigTest < Minitest::Test
  Config = Weft::Server::Config

  # A value each setting must refuse, written as it would appear in weft.rb.
  BAD_VALUES = {
    binds: 'bind "tcp://127.0.0.1:70000"',
    rackup: 'rackup ""',
    app: "app 42",
    environment: 'environment ""',
    workers: "workers -1",
    preload: 'preload "yes"',
    backlog: "backlog 0",
    reuse_port: "reuse_port 1",
    spread_connections: 'spread_connections "no"',
    max_connections: "max_connections 0",
    max_requests_per_connection: "max_requests_per_connection 0",
    first_data_timeout: "first_data_timeout 0",
    header_timeout: "header_timeout -1",
    body_timeout: 'body_timeout "30"',
    body_min_rate: "body_min_rate 0.5",
    partial_head_budget: "partial_head_budget 0",
    linger: "linger -0.5",
    idle_timeout: "idle_timeout Float::INFINITY",
    write_timeout: "write_timeout 0",
    shutdown_timeout: "shutdown_timeout -1",
    worker_boot_timeout: "worker_boot_timeout 0",
    max_request_line: "max_request_line 0",
    max_header_bytes: "max_header_bytes 17 * 1024 * 1024",
    max_headers: "max_headers 5000",
    max_body_bytes: "max_body_bytes -1",
    spool_threshold: "spool_threshold 1.5",
    error_summary_interval: "error_summary_interval 0",
    access_log: 'access_log "/nonexistent-dir/access.log"',
    quiet: "quiet nil",
    stats_path: 'stats_path "stats"',
    metrics_path: 'metrics_path "/with space"',
    control_dir: 'control_dir ""',
    pidfile: 'pidfile "/nonexistent-dir/weft.pid"',
    tag: 'tag "a\nb"',
    before_fork: "before_fork",
    after_worker_boot: "after_worker_boot",
    before_worker_shutdown: "before_worker_shutdown",
    on_restart: "on_restart",
    worker_task: "worker_task",
    warmup: "warmup",
    drain_grace: "drain_grace -1",
    worker_timeout: "worker_timeout 0",
    worker_heap_free: "worker_heap_free 0.9",
    stall_threshold: 'stall_threshold "1"',
    request_deadline: "request_deadline 0"
  }.freeze

  def test_every_setting_refuses_a_bad_value_in_a_config_file_naming_file_line_and_setting
    assert_equal Config::DEFAULTS.keys.sort, Weft::Server::SettingRules::RULES.keys.sort, "settings without a rule"
    assert_equal Config::DEFAULTS.keys.sort, BAD_VALUES.keys.sort, "settings without a bad-value case"
    Dir.mktmpdir do |dir|
      path = File.join(dir, "weft.rb")
      BAD_VALUES.each do |name, line|
        File.write(path, "workers 2\n#{line}\n")
        error = assert_raises(Config::Invalid, line) { Config.new.load_file(path) }
        shown = name == :binds ? "binds" : name.to_s
        assert_match(/\A#{Regexp.escape(path)}:2: #{shown}\b/, error.message, line)
        assert_equal 1, error.message.lines.size, line
      end
    end
  end

  def test_defaults_and_good_values_are_accepted
    config = Config.new(Config::DEFAULTS.reject { |name, _| Config::HOOKS.include?(name) || name == :binds })
    assert_equal 10_000, config[:max_connections]
    config = Config.new(binds: ["tcp://127.0.0.1:0", "tcp://[::1]:0", "unix:///tmp/weft-test.sock"], workers: 0,
                        idle_timeout: 0.5, linger: 0, shutdown_timeout: 0, access_log: $stdout, stats_path: "/stats")
    assert_equal 3, config[:binds].size
  end

  def test_constructor_options_are_checked_before_anything_is_bound
    error = assert_raises(ArgumentError) { Weft::Server.new(->(_) {}, binds: ["tcp://127.0.0.1:0"], max_connections: 0) }
    assert_equal "max_connections 0: must be an integer of at least 1", error.message
    error = assert_raises(ArgumentError) { Weft::Server.new(->(_) {}, binds: ["tcp://nohost.invalid:80"]) }
    assert_match(/binds has "tcp:\/\/nohost.invalid:80": cannot resolve host "nohost.invalid"/, error.message)
    assert_raises(ArgumentError) { Config.new(bogus: 1) }
  end

  def test_config_file_errors_other_than_values_are_one_line_with_their_location
    Dir.mktmpdir do |dir|
      path = File.join(dir, "weft.rb")
      {
        "workers 2\nfrobnicate 3\n" => /:2: unknown setting frobnicate\z/,
        "workers 2\nraise 'boom'\n" => /:2: boom \(RuntimeError\)\z/,
        "workers 2\ndef (\n" => /:\d+: syntax error/,
        "port 70000\n" => /:1: port 70000: must be an integer from 0 to 65535\z/
      }.each do |source, pattern|
        File.write(path, source)
        error = assert_raises(Config::Invalid) { Config.new.load_file(path) }
        assert_match pattern, error.message
        assert_equal 1, error.message.lines.size
      end
      error = assert_raises(Config::Invalid) { Config.new.load_file(File.join(dir, "missing.rb")) }
      assert_match(/config file .*missing.rb: No such file/, error.message)
    end
  end
end
