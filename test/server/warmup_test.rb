# frozen_string_literal: true

require_relative "../test_helper"
require_relative "support/process_helpers"
require "json"
require "net/http"
require "tmpdir"
require "stringio"
require "logger"
require "timeout"
require "weft/server"
require "weft/server/warmup"

# The `warmup` setting (Weft::Server::Warmup): its requests run once, in the master, through the
# server's request path and the preloaded app, before the first fork; the workers and their
# replacements never run them; one that raises is logged and the cluster boots; and on Ruby 3.3+
# with YJIT a fresh worker inherits the code the warm-up had compiled.
class ServerWarmupTest < Minitest::Test
  include Weft::Test::ProcessHelpers

  def watchdog_timeout
    90
  end

  def setup
    @dir = Dir.mktmpdir("weft-warmup-test")
    @served = File.join(@dir, "served")
    @log = File.join(@dir, "weft.log")
  end

  def teardown
    FileUtils.rm_rf(@dir)
  end

  def test_the_warmup_runs_once_in_the_master_before_the_first_fork_and_never_in_a_worker
    cluster("warm", "--preload") do |master, port|
      assert_equal [master], served_by, "the warm-up's request was not served in the master"
      assert_match(/warmup: 1 requests in \d+ ms/, File.read(@log))
      workers = worker_pids(port, tries: 20)
      refute_includes workers, master
      Process.kill("KILL", workers.first)
      eventually(20, "a replacement worker") { (worker_pids(port, tries: 10) - workers).any? }
      assert_equal [master], served_by, "the warm-up ran again after a worker was replaced"
      assert_operator File.read(@log).index("warmup:"), :<, File.read(@log).index("booted"), "a worker booted before the warm-up ended"
    end
  end

  def test_a_warmup_that_raises_is_logged_and_the_cluster_boots_and_serves
    cluster("raise", "--preload") do |master, port|
      log = File.read(@log)
      assert_match(/warmup failed .*ArgumentError: this warm-up is broken/, log)
      assert_match(/warmup: 1 requests in \d+ ms.*; 1 failed/, log)
      assert_equal [master], served_by, "the block after the failing one did not run"
      refute_includes worker_pids(port, tries: 5), master
    end
  end

  # USR1, USR2, TTIN and TTOU end the process (or, TTIN and TTOU, suspend it) by default: sent
  # while the master warms up (a deploy's USR1 soon after a USR2, whose new master warms up while
  # the old workers serve, then see their master gone and stop), they are kept for when it runs.
  def test_signals_sent_during_the_warmup_are_handled_once_the_master_runs
    cluster("slow", "--preload", wait: false) do |master, port|
      eventually(20, "the warm-up started") { File.exist?("#{@served}.warming") }
      Process.kill("TTIN", master)
      Process.kill("USR1", master)
      eventually(20, "three workers") { worker_pids(port, tries: 20).size == 3 }
      assert_nil Process.waitpid(master, Process::WNOHANG), "the master ended"
      eventually(20, "the phased restart") { File.read(@log).include?("phased restart done") }
      assert_includes File.read(@log), "TTIN: 3 workers"
      assert_equal [master], served_by, "the warm-up ran again"
    end
  end

  def test_without_preload_the_warmup_is_skipped_with_a_warning
    cluster("warm") do |_master, port|
      assert_match(/warmup skipped: it needs preload/, File.read(@log))
      refute File.exist?(@served), "a warm-up ran without the app preloaded"
      assert_operator worker_pids(port, tries: 5).size, :>=, 1
    end
  end

  # The same 200 requests to a fresh worker: after a warm-up of the same endpoint it compiles a
  # fraction of what it compiles without one (measured: 12-13 iseqs against 66-69 for a similar
  # app, bench/server/warmup.rb).
  def test_with_yjit_a_fresh_worker_starts_with_the_request_path_compiled
    skip "needs YJIT (Ruby 3.3+ with RUBY_YJIT_ENABLE=1)" unless defined?(RubyVM::YJIT) && RubyVM::YJIT.enabled?
    cold = cluster("none", "--preload", "-w", "1") { |_master, port| first_requests(port) }
    warm = cluster("batch", "--preload", "-w", "1") { |_master, port| first_requests(port) }
    assert_operator warm["inherited"], :>, cold["inherited"] + 50, "the worker did not inherit the warm-up's code: #{[cold, warm]}"
    assert_operator warm["compiled"], :<, cold["compiled"] / 2, "cold #{cold}, warm #{warm}"
    assert_match(/warmup: 150 requests in \d+ ms; YJIT compiled \d+ methods and blocks/, File.read(@log))
  end

  private

  def cluster(mode, *args, wait: true, &block)
    port = Weft::Test.free_tcp_port
    FileUtils.rm_f(@log)
    with_weft("-C", File.join(FIXTURES, "warmup.rb"), "-p", port.to_s, "-o", "127.0.0.1", *args,
              *(args.include?("-w") ? [] : ["-w", "2"]),
              port: port, log: @log, env: { "WARMUP_TEST_MODE" => mode, "WARMUP_TEST_FILE" => @served }) do |master|
      eventually(20, "a worker booted") { File.read(@log).include?("booted") } if wait
      block.call(master, port)
    end
  end

  # @return [Array<Integer>] the pids that served GET /warm
  def served_by
    File.exist?(@served) ? File.readlines(@served).map(&:to_i) : []
  end

  # 200 batches on one keep-alive connection to a fresh worker, then its YJIT counters.
  # @return [Hash] "inherited" (compiled iseqs at boot), "compiled" (since), "compile_ns"
  def first_requests(port)
    body = JSON.generate({ "items" => Array.new(20) { |id| { "id" => id, "name" => "item #{id}" } } })
    Net::HTTP.start("127.0.0.1", port) do |http|
      200.times { assert_equal "200", http.post("/batch", body, "content-type" => "application/json").code }
      JSON.parse(http.get("/yjit").body)
    end
  end
end

# Weft::Server::Warmup.run in this process: the requests reach the app through a server of its
# own, a block past the time limit is cut short where it waits, and nothing is left behind.
class ServerWarmupRunTest < Minitest::Test
  def test_requests_reach_the_app_and_the_last_response_is_returned
    seen = []
    app = lambda do |env|
      seen << [env["REQUEST_METHOD"], env["PATH_INFO"], env["rack.input"].read]
      [201, { "content-type" => "text/plain", "x-n" => seen.size.to_s }, ["made"]]
    end
    answers = []
    config = Weft::Server::Config.new(warmup: [->(warm) { answers << warm.post("/things", body: "x", rounds: 3) }])
    result = Weft::Server::Warmup.run(app, config, log: Logger.new(log = StringIO.new))
    assert_equal [["POST", "/things", "x"]] * 3, seen
    assert_equal [201, "3", "made"], [answers.first.status, answers.first.headers["x-n"], answers.first.body]
    assert_equal 3, result[:requests]
    assert_equal 0, result[:failures]
    assert_match(/warmup: 3 requests in \d+ ms/, log.string)
    assert_nil Fiber.scheduler, "the warm-up's reactor is still installed"
    refute_match(/still (running|open)/, log.string, "the warm-up's own server, client or threads were left behind")
  end

  # A connection the app opened on its first request, and a thread it started, outlive the
  # warm-up in the master: the workers would share the one and lack the other. Named in the log.
  def test_sockets_and_threads_the_app_left_open_are_named
    left = []
    app = lambda do |_env|
      if left.empty?
        left.concat(UNIXSocket.pair)
        left << Thread.new { sleep }.tap { |thread| thread.name = "app metrics" }
      end
      [200, {}, ["ok"]]
    end
    config = Weft::Server::Config.new(warmup: [->(warm) { warm.get("/", rounds: 2) }])
    Weft::Server::Warmup.run(app, config, log: Logger.new(log = StringIO.new))
    assert_match(/warmup: 1 thread started during the warm-up still running in the master, not in the workers \(app metrics\)/, log.string)
    fds = left.first(2).map { |socket| socket.fileno.to_s }
    assert_match(/warmup: 2 sockets opened during the warm-up still open \(fd #{fds.join(', ')}\).*before_fork/, log.string)
  ensure
    left.last&.kill
    left.first(2).each(&:close)
  end

  # An app that starts a background task on its first request (a flusher, a cache refresher)
  # would otherwise keep the warm-up's reactor, and the master's boot, waiting for ever.
  def test_tasks_the_app_left_running_are_cancelled_and_named
    ended = Queue.new
    app = lambda do |_env|
      @flusher ||= Weft.spawn(detached: true, name: "app flusher") do
        loop { sleep 0.05 }
      ensure
        ended << :flusher
      end
      [200, {}, ["ok"]]
    end
    config = Weft::Server::Config.new(warmup: [->(warm) { warm.get("/", rounds: 2) }])
    log = StringIO.new
    result = Timeout.timeout(10) { Weft::Server::Warmup.run(app, config, log: Logger.new(log)) }
    assert_equal 0, result[:failures]
    assert_equal :flusher, ended.pop(true), "the app's task did not run its ensure"
    assert_match(/warmup: cancelled 1 task the app left running \(app flusher\)/, log.string)
  end

  def test_inside_a_running_reactor_the_warmup_leaves_its_tasks_alone
    app = ->(_env) { [200, {}, ["ok"]] }
    config = Weft::Server::Config.new(warmup: [->(warm) { warm.get("/", rounds: 2) }])
    Weft.run do
      neighbour = Weft.spawn(name: "neighbour") { sleep 0.5 }
      result = Weft::Server::Warmup.run(app, config, log: Logger.new(log = StringIO.new))
      assert_equal 2, result[:requests]
      refute neighbour.done?, "the warm-up cancelled a task that was not its own"
      refute_match(/cancelled/, log.string)
      neighbour.wait
    end
  end

  def test_a_block_past_the_time_limit_is_cut_short_and_the_rest_do_not_run
    app = lambda do |env|
      sleep 5 if env["PATH_INFO"] == "/slow"
      [200, {}, ["ok"]]
    end
    later = false
    config = Weft::Server::Config.new(warmup: [->(warm) { warm.get("/slow", rounds: 1) }, ->(_warm) { later = true }])
    started = Weft::Timers.now
    result = Weft::Server::Warmup.run(app, config, log: Logger.new(log = StringIO.new), timeout: 0.3)
    assert_operator Weft::Timers.now - started, :<, 2.5, "the request in the app was not cut off after the shutdown timeout"
    assert_match(/warmup cut short: the warm-up took longer than 0.3 s/, log.string)
    assert_equal 1, result[:failures]
    refute later, "a block ran after the time limit"
  end
end
