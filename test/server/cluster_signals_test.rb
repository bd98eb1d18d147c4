# frozen_string_literal: true

require_relative "../test_helper"
require_relative "support/server_helpers"
require_relative "support/process_helpers"
require "tmpdir"

# Signals that land in a cluster's narrow windows, held open by hooks that wait for a file the
# test writes once it has sent its signal, so that the signal lands inside the window whatever
# the machine's load: a worker between its fork and trapping its own signals; a master between
# USR2 and its exec, and while the exec'd master boots. And /stats while a hot restart's two
# generations of workers overlap.
class ServerClusterSignalsTest < Minitest::Test
  include Weft::Test::ServerHelpers
  include Weft::Test::ProcessHelpers

  def watchdog_timeout
    120
  end

  # A config file whose Process._fork hook (run in the child right after the fork, before
  # Cluster#run_worker, as a library's after-fork hook would) holds the first worker forked
  # after `hold` exists until `go` exists, writing its pid to `held` first.
  FORK_HOLD = <<~RUBY
    Process.singleton_class.prepend(Module.new do
      def _fork
        pid = super
        if pid.zero? && File.exist?(ENV.fetch("HOLD")) && !File.exist?(ENV.fetch("GO"))
          File.write(ENV.fetch("HELD") + ".tmp", Process.pid.to_s)
          File.rename(ENV.fetch("HELD") + ".tmp", ENV.fetch("HELD")) # whole, or not there
          deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 60
          sleep 0.02 until File.exist?(ENV.fetch("GO")) || Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
        end
        pid
      end
    end)
  RUBY

  # A TERM to a worker that has not trapped its own signals yet (the master's handlers, which
  # it inherited, ran in it) stops it once it can: before, it was lost and the worker served on.
  def test_a_term_sent_to_a_worker_before_it_trapped_its_signals_stops_it
    with_held_fork do |master, port, files|
      first = eventually(15, "one worker serving") { (p = worker_pids(port, tries: 5)).size == 1 && p.first }
      File.write(files[:hold], "")
      Process.kill("KILL", first) # its replacement is forked with the hold in place
      held = eventually(15, "the replacement held in its fork hook") { File.size?(files[:held]) && File.read(files[:held]).to_i }
      Process.kill("TERM", held)
      File.write(files[:go], "")
      eventually(20, "the worker TERMed before it trapped its signals exits") { !child_pids(master).include?(held) }
      eventually(20, "a replacement serving") { (p = worker_pids(port, tries: 5)).size == 1 && !p.include?(held) }
      assert_nil Process.waitpid(master, Process::WNOHANG), "the master stopped"
    end
  end

  # The same window later on: a TERM during the worker's after_worker_boot hooks (the app
  # loaded, the server not built yet) stops it gracefully once its server runs, its
  # before_worker_shutdown hooks run. Before, Ruby's default turned it into an exception in the
  # hook: "worker 0 failed: SignalException", and no before_worker_shutdown.
  def test_a_term_during_after_worker_boot_stops_the_worker_gracefully
    Dir.mktmpdir do |dir|
      files = %i[hold go held shut].to_h { |name| [name, File.join(dir, name.to_s)] }
      config = <<~RUBY
        workers 1
        after_worker_boot do
          next unless File.exist?(#{files[:hold].inspect}) && !File.exist?(#{files[:go].inspect})
          File.write("#{files[:held]}.tmp", Process.pid.to_s)
          File.rename("#{files[:held]}.tmp", #{files[:held].inspect}) # whole, or not there
          sleep 0.02 until File.exist?(#{files[:go].inspect})
        end
        before_worker_shutdown { File.write(#{files[:shut].inspect}, Process.pid.to_s) }
      RUBY
      with_cluster(dir, config) do |master, port, log|
        first = eventually(15, "one worker serving") { (p = worker_pids(port, tries: 5)).size == 1 && p.first }
        File.write(files[:hold], "")
        Process.kill("KILL", first)
        held = eventually(15, "the replacement held in after_worker_boot") { File.size?(files[:held]) && File.read(files[:held]).to_i }
        Process.kill("TERM", held)
        File.write(files[:go], "")
        eventually(20, "the worker TERMed in after_worker_boot exits") { !child_pids(master).include?(held) }
        assert_equal held.to_s, File.exist?(files[:shut]) && File.read(files[:shut]), "its before_worker_shutdown hooks did not run"
        refute_match(/failed/, File.read(log))
        eventually(20, "a replacement serving") { (p = worker_pids(port, tries: 5)).size == 1 && !p.include?(held) }
      end
    end
  end

  # The master's stop sends TERM to a worker still in that window: it must not wait
  # shutdown_timeout + 5 s (here 40 s) for it, nor kill it.
  def test_the_masters_stop_does_not_wait_for_a_worker_forked_moments_before
    with_held_fork("shutdown_timeout 35") do |master, port, files|
      first = eventually(15, "one worker serving") { (p = worker_pids(port, tries: 5)).size == 1 && p.first }
      File.write(files[:hold], "")
      Process.kill("KILL", first)
      held = eventually(15, "the replacement held in its fork hook") { File.size?(files[:held]) && File.read(files[:held]).to_i }
      started = Weft::Timers.now
      Process.kill("TERM", master)
      eventually(10, "the master stopping") { File.read(files[:log]).include?("stopping:") }
      # The master TERMs its workers right after that line. (Were it held up for longer than
      # this second, the worker would get the TERM with its own handlers in place: the test
      # would pass without testing the window, never fail.)
      sleep 1
      File.write(files[:go], "")
      eventually(25, "the master exits") { Process.waitpid(master, Process::WNOHANG) }
      assert_operator Weft::Timers.now - started, :<, 25, "the master waited for the held worker"
      refute process_alive?(held), "the held worker outlived its master"
    end
  end

  # A TERM that reaches the master between USR2 and its exec (here while its on_restart hook
  # runs) was queued in a Ruby image the exec replaced: lost, and the new master served on.
  def test_a_term_queued_before_a_hot_restarts_exec_stops_the_cluster
    Dir.mktmpdir do |dir|
      restarting = File.join(dir, "restarting")
      go = File.join(dir, "go")
      config = <<~RUBY
        on_restart do
          File.write(#{restarting.inspect}, "")
          sleep 0.02 until File.exist?(#{go.inspect})
        end
      RUBY
      with_cluster(dir, config) do |master, port, log|
        old = eventually(15, "two workers serving") { (p = worker_pids(port)).size == 2 && p }
        Process.kill("USR2", master)
        eventually(10, "the on_restart hook running") { File.exist?(restarting) }
        Process.kill("TERM", master)
        File.write(go, "")
        eventually(20, "the master exits") { Process.waitpid(master, Process::WNOHANG) }
        eventually(10, "the workers exit") { old.none? { |pid| process_alive?(pid) } }
        assert_raises(Errno::ECONNREFUSED) { TCPSocket.new("127.0.0.1", port) }
        refute_includes File.read(log), "re-executing", "the master exec'd instead of stopping"
      end
    end
  end

  # TERM, INT or QUIT sent to the master's pid while the exec'd master boots (Ruby, Bundler and
  # Weft loading: 1-4.6 s) ends it, and the previous workers, their master gone, finish their
  # requests and exit: nothing is left serving, and nothing waits.
  def test_a_stop_signal_sent_while_a_hot_restarted_master_boots_stops_the_cluster
    %w[TERM INT QUIT].each do |signal|
      Dir.mktmpdir do |dir|
        # QUIT's default dumps core; none is wanted in the checkout.
        with_cluster(dir, spawn: { rlimit_core: 0 }) do |master, port, log|
          old = eventually(15, "#{signal}: two workers serving") { (p = worker_pids(port)).size == 2 && p }
          client = Thread.new { get_body(port, "/sleep?s=1") }
          sleep 0.3 # the request is in flight
          Process.kill("USR2", master)
          # The line is written just before the exec; Ruby's boot alone takes far longer than a look.
          eventually(10, "#{signal}: the exec") { File.read(log).include?("hot restart: re-executing") }
          Process.kill(signal, master)
          assert_match(/\A\d+\z/, client.value, "#{signal}: the in-flight request was cut")
          eventually(20, "#{signal}: the master exits") { Process.waitpid(master, Process::WNOHANG) }
          eventually(10, "#{signal}: the previous workers exit") { old.none? { |pid| process_alive?(pid) } }
          assert_raises(Errno::ECONNREFUSED) { TCPSocket.new("127.0.0.1", port) }
        end
      end
    end
  end

  # A TERM to the new master once it has trapped its signals but before its workers booted: it
  # stops its workers and the previous ones, and exits only once those have finished their
  # requests too. (Before, it waited for its own only, and left the previous ones draining with
  # no master.) It tells them to stop: left alone they would serve on, their master alive, until
  # it killed them shutdown_timeout (30 s) + 5 s later.
  def test_a_hot_restarted_master_stopping_waits_for_the_previous_workers
    Dir.mktmpdir do |dir|
      files = %i[hold go held].to_h { |name| [name, File.join(dir, name.to_s)] }
      config = <<~RUBY
        after_worker_boot do
          next unless File.exist?(#{files[:hold].inspect}) && !File.exist?(#{files[:go].inspect})
          File.write("#{files[:held]}.tmp", Process.pid.to_s)
          File.rename("#{files[:held]}.tmp", #{files[:held].inspect}) # whole, or not there
          sleep 0.02 until File.exist?(#{files[:go].inspect})
        end
      RUBY
      with_cluster(dir, config) do |master, port, _log|
        old = eventually(15, "two workers serving") { (p = worker_pids(port)).size == 2 && p }
        File.write(files[:hold], "")
        Process.kill("USR2", master)
        eventually(40, "a new worker held in after_worker_boot") { File.size?(files[:held]) }
        # Only the previous workers accept meanwhile. A request on a connection one of them has
        # kept alive is answered, whenever the stop comes (the graceful stop's promise).
        client = connect(port)
        client.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        serving = read_response(client).body.to_i
        assert_includes old, serving
        client.write("GET /sleep?s=5 HTTP/1.1\r\nHost: x\r\n\r\n")
        sleep 0.5 # most likely in flight by now (and if not, kept-alive: answered all the same)
        stopped_at = Weft::Timers.now
        Process.kill("TERM", master)
        File.write(files[:go], "")
        eventually(40, "the master exits") { Process.waitpid(master, Process::WNOHANG) }
        assert_operator Weft::Timers.now - stopped_at, :<, 30, "the master waited for the previous workers' kill"
        alive = old.select { |pid| process_alive?(pid) }
        assert_empty alive, "previous workers still running after their master exited"
        assert_equal serving, read_response(client).body.to_i, "the previous worker's request"
      ensure
        client&.close
      end
    end
  end

  # During a hot restart the old master's worker 0 and the new master's worker 0 both serve:
  # /stats lists both, each labelled with its master generation, until the old one has exited.
  # (Before, they wrote the same file: /stats showed one or the other.)
  def test_stats_during_a_hot_restart_list_both_generations_labelled
    stats_while_a_worker_and_its_replacement_serve("USR2", new_generation: 1)
  end

  # The same for a phased restart: a worker and its replacement, one generation.
  def test_stats_during_a_phased_restart_list_a_worker_and_its_replacement
    stats_while_a_worker_and_its_replacement_serve("USR1", new_generation: 0)
  end

  # A master killed (KILL: no clean-up) leaves its statistics directory, named by its pid, and a
  # later master given that pid listed the dead one's workers in /stats as its own (a full
  # test run left 124 such directories with snapshots in /tmp). Here `sh` leaves one for its
  # own pid and execs the master, which keeps the pid.
  def test_a_master_ignores_the_statistics_a_killed_master_with_its_pid_left
    Dir.mktmpdir do |dir|
      control = File.join(dir, "control")
      port = free_tcp_port
      File.write(File.join(dir, "weft.rb"), "workers 1\ncontrol_dir #{control.inspect}\nstats_path \"/stats\"\n")
      ghost = '{"worker":0,"pid":999999,"requests":5}'
      leave = "mkdir -p #{control}/weft-$$/generation-0 && " \
              "printf '%s' '#{ghost}' > #{control}/weft-$$/generation-0/worker-0-999999.json && exec \"$@\""
      pid = Process.spawn("sh", "-c", leave, "sh", RbConfig.ruby, File.join(ROOT, "exe/weft"), "serve",
                          File.join(FIXTURES, "pid.ru"), "-C", File.join(dir, "weft.rb"), "-p", port.to_s, "-o", "127.0.0.1",
                          chdir: ROOT, out: File::NULL, err: File::NULL, pgroup: true)
      begin
        wait_for_port(port, pid)
        worker = eventually(15, "a worker serving") { (p = worker_pids(port, tries: 3)).size == 1 && p.first }
        assert_equal [worker], stats(port)["workers"].map { |w| w["pid"] }
      ensure
        stop_process(pid)
      end
    end
  end

  private

  # A one-worker cluster whose worker holds a long request when `signal` replaces it: once the
  # replacement serves, /stats (and /metrics) list both, the old one draining, until the old
  # one has exited.
  def stats_while_a_worker_and_its_replacement_serve(signal, new_generation:)
    Dir.mktmpdir do |dir|
      with_cluster(dir, "workers 1\nstats_path \"/stats\"\nmetrics_path \"/metrics\"") do |master, port, _log|
        old = eventually(15, "one worker serving") { (p = worker_pids(port, tries: 5)).size == 1 && p.first }
        idle = stats(port)["totals"]["in_flight"] # the /stats request's own, if it counts
        # A long request holds the old worker, draining, once the new one has booted.
        held = connect(port)
        held.write("GET /sleep?s=60 HTTP/1.1\r\nHost: x\r\n\r\n")
        eventually(10, "the request in flight") { stats(port)["totals"]["in_flight"] == idle + 1 }
        Process.kill(signal, master)
        new = eventually(40, "the new worker serving") { (p = worker_pids(port, tries: 3) - [old]).size == 1 && p.first }
        listed = nil
        workers = begin
          eventually(10, "both workers listed") { (listed = stats(port)["workers"]).size == 2 && listed }
        rescue Minitest::Assertion
          flunk("both workers listed within 10s (#{old} and #{new}; last seen: #{listed.inspect})")
        end
        listed = workers.map { |w| [w["pid"], w["worker"], w["master_generation"]] }
        assert_equal [[old, 0, 0], [new, 0, new_generation]], listed.sort_by { |pid, _, _| pid == old ? 0 : 1 }
        # (A snapshot counts the /stats request its worker was answering when it was taken.)
        assert_operator workers.find { |w| w["pid"] == old }["in_flight"], :>=, 1, "the old worker's request"
        assert_operator stats(port)["totals"]["in_flight"], :>=, 1, "the totals count the old worker's request"
        metrics = get_body(port, "/metrics")
        assert_match(/^weft_requests_in_flight\{worker="0",pid="#{old}",master_generation="0"\} [1-9]\d*$/, metrics)
        assert_match(/^weft_requests_in_flight\{worker="0",pid="#{new}",master_generation="#{new_generation}"\} \d+$/, metrics)

        Process.kill("KILL", old) # its file goes once the master has reaped it
        eventually(10, "only the new worker listed") { stats(port)["workers"].map { |w| w["pid"] } == [new] }
      ensure
        held&.close
      end
    end
  end

  def stats(port)
    JSON.parse(get_body(port, "/stats"))
  end

  # Runs a one-worker, preloaded cluster of pid.ru with FORK_HOLD (and `config`); yields the
  # master's pid, the port and the hold's files (:hold, :go, :held) and the log (:log).
  def with_held_fork(config = "")
    Dir.mktmpdir do |dir|
      files = %i[hold go held].to_h { |name| [name, File.join(dir, name.to_s)] }
      env = files.to_h { |name, path| [name.to_s.upcase, path] }
      with_cluster(dir, "workers 1\npreload true\n#{FORK_HOLD}\n#{config}", env: env) do |master, port, log|
        yield master, port, files.merge(log: log)
      end
    end
  end

  # Runs a cluster of pid.ru (two workers unless `config` says otherwise) with a config file in
  # `dir` (and Process.spawn options `spawn`); yields the master's pid, the port and the log's path.
  def with_cluster(dir, config = "", env: {}, spawn: {})
    log = File.join(dir, "weft.log")
    port = free_tcp_port
    File.write(File.join(dir, "weft.rb"), "workers 2\n#{config}\n")
    with_weft(File.join(FIXTURES, "pid.ru"), "-C", File.join(dir, "weft.rb"), "-p", port.to_s, "-o", "127.0.0.1",
              port: port, log: log, env: env, spawn: spawn) do |master|
      yield master, port, log
    end
  end

  # Whether `pid` is running (not exited, nor a zombie awaiting its reaping).
  def process_alive?(pid)
    !File.read("/proc/#{pid}/stat")[/\) (\w)/, 1].then { |state| state.nil? || state == "Z" }
  rescue SystemCallError
    false
  end
end
