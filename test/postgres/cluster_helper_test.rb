# frozen_string_literal: true

require_relative "../test_helper"
require "pg"

class PostgresClusterTest < Minitest::Test
  def cluster
    Weft::Test::PostgresCluster.shared
  end

  # Stop/restart tests use a cluster of their own, so that connections other test files keep
  # open to the shared cluster (pools, say) never see these restarts.
  def self.private_cluster
    @private_cluster ||= Weft::Test::PostgresCluster.new.start
  end

  def private_cluster
    self.class.private_cluster
  end

  def test_answers_over_tcp
    PG.connect(cluster.conninfo) do |conn|
      assert_equal [["1"]], conn.exec("select 1").values
      assert_equal "127.0.0.1", conn.host
    end
    assert_match %r{\Apostgres://postgres@127\.0\.0\.1:\d+/postgres\z}, cluster.url
    PG.connect(cluster.url) { |conn| assert_equal "postgres", conn.exec("select current_user").getvalue(0, 0) }
  end

  def test_answers_over_unix_socket
    assert File.socket?(File.join(cluster.socket_dir, ".s.PGSQL.#{cluster.port}"))
    PG.connect(host: cluster.socket_dir, port: cluster.port, user: "postgres", dbname: "postgres") do |conn|
      assert_equal [["1"]], conn.exec("select 1").values
      # A unix-socket session has no client address.
      assert_nil conn.exec("select inet_client_addr()").getvalue(0, 0)
    end
  end

  def test_settings_are_tuned_for_tests
    rows = cluster.psql("select name, setting from pg_settings " \
                        "where name in ('fsync', 'synchronous_commit', 'full_page_writes', 'max_connections')")
    settings = rows.to_h { |row| [row["name"], row["setting"]] }
    assert_equal({ "fsync" => "off", "synchronous_commit" => "off", "full_page_writes" => "off",
                   "max_connections" => "300" }, settings)
  end

  def test_pg_sleep
    rows = assert_elapsed_under(5) { cluster.psql("select pg_sleep(0.2) as slept, 42 as answer") }
    assert_equal "42", rows.first["answer"]
  end

  def test_create_database
    url = cluster.create_database("weft_cluster_test")
    assert url.end_with?("/weft_cluster_test")
    assert_equal url, cluster.create_database("weft_cluster_test"), "creating it again is a no-op"
    assert_equal [{ "db" => "weft_cluster_test" }], cluster.psql("select current_database() as db", dbname: "weft_cluster_test")
  end

  def test_restart_under_a_connection
    conn = PG.connect(private_cluster.conninfo)
    before = conn.exec("select pg_postmaster_start_time()").getvalue(0, 0)
    port = private_cluster.port

    private_cluster.restart(mode: :fast)

    assert_equal port, private_cluster.port, "a restart keeps the port"
    assert_raises(PG::Error) { conn.exec("select 1") }
    conn.reset
    refute_equal before, conn.exec("select pg_postmaster_start_time()").getvalue(0, 0)
  ensure
    conn&.close
  end

  def test_stop_and_start
    private_cluster.stop
    refute private_cluster.running?
    assert_raises(PG::ConnectionBad) { PG.connect(private_cluster.conninfo + " connect_timeout=2") }
    private_cluster.start
    assert_equal [{ "one" => "1" }], private_cluster.psql("select 1 as one")
  end

  # :immediate is a crash: the server runs crash recovery on the next start. With fsync and
  # synchronous_commit off, only data that made it to a checkpoint is sure to survive.
  def test_immediate_restart_recovers
    private_cluster.psql("create table if not exists crash_probe (id int)")
    private_cluster.psql("checkpoint")
    private_cluster.restart(mode: :immediate)
    assert_equal [], private_cluster.psql("select * from crash_probe")
    assert_match(/database system was interrupted|not properly shut down/, private_cluster.log_tail(200))
  end

  def test_private_cluster_is_removed_by_destroy
    other = Weft::Test::PostgresCluster.new.start
    refute_equal cluster.port, other.port
    assert_equal [{ "one" => "1" }], other.psql("select 1 as one")
    dir = other.base_dir
    other.destroy
    refute File.exist?(dir)
  end

  def test_finds_the_server_programs
    assert File.executable?(File.join(Weft::Test::PostgresCluster.bin_dir, "initdb"))
  end
end
