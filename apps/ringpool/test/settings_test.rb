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

  # The snapshot's name can be read by anyone who can list the socket folder: a hash of a URL
  # with the password in it was a dictionary attack away from the password.
  def test_the_catalog_snapshot_is_named_after_the_database_not_its_password
    snapshot = ->(url) { Ringpool::Settings.new(database_url: url, socket_dir: "/s").catalog_snapshot }
    urls = %w[postgres://app:secret1@db/ringpool postgres://app:other@db/ringpool postgres://app@db/ringpool]
    assert_equal 1, urls.map(&snapshot).uniq.size, "the password does not change the name"
    assert_equal 1, %w[postgres://app@db/ringpool?password=x&sslmode=require postgres://app@db/ringpool?password=y&sslmode=require].map(&snapshot).uniq.size
    conninfo = ["host=db dbname=ringpool password=secret1", "host=db dbname=ringpool password='other one'"]
    assert_equal 1, conninfo.map(&snapshot).uniq.size
    refute_equal snapshot.("postgres://app@db/ringpool"), snapshot.("postgres://app@db/other"), "databases still differ"
  end

  # The default socket folder is under /tmp, where another user could have made it first and
  # then replaced a shard's socket (reading and answering its peers' calls) or the catalog
  # snapshot: a folder others may write to is refused.
  def test_a_socket_folder_others_may_write_to_is_refused
    Dir.mktmpdir do |parent|
      fresh = File.join(parent, "sockets")
      settings = Ringpool::Settings.new(database_url: "postgres://x/y", socket_dir: fresh)
      assert_equal fresh, settings.prepare_socket_dir
      assert_equal 0o700, File.stat(fresh).mode & 0o777, "made for this user alone"
      File.chmod(0o777, fresh)
      error = assert_raises(ArgumentError) { settings.prepare_socket_dir }
      assert_match(/RINGPOOL_SOCKET_DIR/, error.message)
      if Process.uid.zero? # only root can give the folder away
        File.chmod(0o755, fresh)
        File.chown(65_534, nil, fresh)
        assert_raises(ArgumentError) { settings.prepare_socket_dir }
      end
    end
  end
end
