# frozen_string_literal: true

require_relative "test_helper"

# Bad settings are refused when the shard is configured, naming the setting.
class RingpoolSettingsTest < Minitest::Test
  def test_from_env_reads_the_environment
    settings = Ringpool::Settings.from_env({ "DATABASE_URL" => "postgres://x/y", "RINGPOOL_SOCKET_DIR" => "/run/rp",
                                             "RINGPOOL_DEADLINE_MS" => "80", "RINGPOOL_OWNERSHIP_INTERVAL" => "0.5",
                                             "RINGPOOL_DB_POOL" => "3", "RINGPOOL_BREAKER_OPEN_FOR" => "2" })
    assert_equal ["postgres://x/y", 0.08, 0.5, 3], [settings.database_url, settings.deadline, settings.ownership_interval, settings.db_pool_size]
    assert_equal "unix:///run/rp/shard-2.sock", settings.shard_url(2)
    assert_equal({ open_for: 2.0, ramp_for: 6.0, minimum_calls: 20, window_seconds: 3.0, failing_for: 1.5 }, settings.breaker)
  end

  def test_a_peer_address_gives_each_shard_a_tcp_url
    settings = Ringpool::Settings.from_env({ "DATABASE_URL" => "postgres://x/y", "RINGPOOL_PEER_ADDRESS" => "10.0.0.5:7000" })
    assert_equal %w[http://10.0.0.5:7000 http://10.0.0.5:7002], [settings.shard_url(0), settings.shard_url(2)]
    assert_equal "tcp://10.0.0.5:7002", Ringpool::Settings.peer_bind(settings.shard_url(2))
    ipv6 = Ringpool::Settings.new(database_url: "postgres://x/y", peer_address: "[fd00::5]:7000")
    assert_equal "http://[fd00::5]:7001", ipv6.shard_url(1)
    assert_equal "unix:///x/shard-1.sock", Ringpool::Settings.peer_bind("unix:///x/shard-1.sock")
  end

  def test_bad_values_are_argument_errors_naming_the_setting
    {
      {} => /DATABASE_URL/,
      { "RINGPOOL_DEADLINE_MS" => "fast" } => /RINGPOOL_DEADLINE_MS/,
      { "RINGPOOL_DEADLINE_MS" => "-5" } => /deadline/,
      { "RINGPOOL_OWNERSHIP_INTERVAL" => "0" } => /ownership_interval/,
      { "RINGPOOL_DB_POOL" => "many" } => /RINGPOOL_DB_POOL/,
      { "RINGPOOL_DB_POOL" => "0" } => /db_pool_size/,
      { "RINGPOOL_BREAKER_OPEN_FOR" => "0" } => /open_for/,
      { "RINGPOOL_BREAKER_MINIMUM_CALLS" => "x" } => /RINGPOOL_BREAKER_MINIMUM_CALLS/,
      { "RINGPOOL_BREAKER_WINDOW" => "0" } => /window_seconds/,
      { "RINGPOOL_BREAKER_WINDOW" => "1" } => /failing_for/,
      { "RINGPOOL_PEER_ADDRESS" => "10.0.0.5" } => /RINGPOOL_PEER_ADDRESS/,
      { "RINGPOOL_PEER_ADDRESS" => "10.0.0.5:70000" } => /RINGPOOL_PEER_ADDRESS/
    }.each do |env, message|
      env = { "DATABASE_URL" => "postgres://x/y" }.merge(env) unless env.empty?
      error = assert_raises(ArgumentError, env.inspect) { Ringpool::Settings.from_env(env) }
      assert_match message, error.message
    end
  end
end
