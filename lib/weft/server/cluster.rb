# frozen_string_literal: true

require "tmpdir"
require "fileutils"
require "rbconfig"
require_relative "../server"
require_relative "fork_heap"
require_relative "warmup"
require_relative "worker_loads"
require_relative "accept_spread"

module Weft
  class Server
    # The master process: owns the listening sockets, forks worker processes that each run a
    # Server in its own reactor, replaces the ones that die, and reacts to signals:
    #
    #   TERM, INT, QUIT  stop accepting, let workers finish in-flight requests, exit
    #   TTIN / TTOU      one worker more / fewer
    #   USR1             phased restart: replace workers one at a time (new code when not preloaded)
    #   USR2             hot restart: re-exec the master with the listening sockets inherited;
    #                    the old workers serve until the new ones are up
    #
    # All workers accept from the same inherited sockets, so the kernel's accept queue holds
    # new connections through any restart and none is refused (docs/server.md has the why and
    # the measurements); with `spread_connections` they share new connections by their open
    # ones, published in a table the master maps before forking (WorkerLoads, AcceptSpread).
    # The master itself runs no reactor: a plain select loop over a self-pipe fed by the signal
    # handlers and a pipe from each worker.
    #
    # A worker's pipe carries its pid once it has booted, then a heartbeat byte at least once a
    # second, written by a task of the worker's reactor (Server#beat). A worker whose reactor is
    # stuck (a request in an endless loop) stops beating, and after `worker_timeout` seconds the
    # master kills and replaces it. A pipe rather than a timestamp in shared memory (the
    # WorkerLoads table) or a file's mtime: either would have to be polled, and a file named by
    # worker index would be shared by an old worker and its replacement during a phased
    # restart; a pipe belongs to one process, wakes the master's select when it beats, and
    # tells it at EOF that the worker is gone.
    class Cluster
      # One worker process as the master sees it.
      # `slot` is its place in the shared WorkerLoads (nil when the cluster does not spread
      # connections, or every slot was taken).
      Worker = Struct.new(:index, :pid, :generation, :booted, :pipe, :started_at, :stopping, :last_beat, :killed, :slot)

      # Environment variables carried across a hot restart.
      LISTEN_FDS = "WEFT_LISTEN_FDS"
      OLD_WORKERS = "WEFT_OLD_WORKERS"
      # How many hot restarts the master has been through: each master generation's workers
      # publish their statistics in a directory of its own (#run).
      MASTER_GENERATION = "WEFT_MASTER_GENERATION"
      SIGNALS = %w[TERM INT QUIT HUP TTIN TTOU USR1 USR2 CHLD].freeze
      # The signals that stop the master: until it has loaded the app and warmed it up, they
      # keep Ruby's default (an exception where the master is, which ends it at once, its
      # listeners closed) rather than wait for a warm-up of up to Warmup::TIMEOUT. HUP is one
      # (Server::GRACEFUL_STOP_SIGNALS says why).
      STOP_SIGNALS = GRACEFUL_STOP_SIGNALS
      # The signals only a master acts on. By default USR1 and USR2 end a process and TTIN and
      # TTOU suspend it, so where no master handles them they are ignored: in a worker (a stray
      # one sent to the whole process group), and across a hot restart's exec, until the new
      # master traps them in #run. An ignored disposition survives exec and Ruby keeps it as it
      # boots; one left to its default, a USR1 or a second USR2 sent while the new master booted
      # (1.4 s at load 2.5, 3.5-4.6 s at load 8-12) ended it, and its old workers, seeing their
      # master gone, stopped too: nothing served. A signal sent then is dropped instead.
      MASTER_ONLY_SIGNALS = %w[USR1 USR2 TTIN TTOU].freeze

      # @param config [Config]
      # @param loader [#call] returns the Rack app (runs in the master with preload, else in each worker)
      # @param argv [Array<String>] how to re-exec this master for a hot restart
      def initialize(config, loader, argv: nil)
        @config = config
        @loader = loader
        @argv = argv
        @count = config.worker_count
        @workers = []
        @generation = 0
        @app = nil
        @stopping = false
        @log = Weft.logger
        @last_spawn = {}
        @phased = nil
        @settled_gc_count = nil
        # A hot restart's previous workers (the previous master generations'), still serving
        # until this master's workers have booted, then told to stop (TERM, once:
        # #stop_previous_workers), until they have exited (#reap).
        @previous_workers = ENV.delete(OLD_WORKERS).to_s.split(",").map(&:to_i)
        @previous_workers_stopping = false
        @master_generation = Integer(ENV.delete(MASTER_GENERATION) || 0)
      end

      # Runs the cluster until told to stop. @return [void]
      def run
        @master_pid = Process.pid
        @listeners = inherit_or_bind
        @loads = worker_loads
        @board_root = File.join(@config[:control_dir] || Dir.tmpdir, "weft-#{Process.pid}")
        # A first start has no previous workers to show: what the directory holds was left by a
        # killed master whose pid this one reuses, and its workers' snapshots, of this master's
        # generation too, showed in /stats as workers of this one (a full test run leaves a
        # hundred such directories in /tmp, its masters killed, on a machine of 32,768 pids).
        FileUtils.rm_rf(@board_root) if @previous_workers.empty?
        FileUtils.mkdir_p(Statistics::Board.directory(@board_root, @master_generation))
        write_pidfile
        # The others are queued from the start, and handled once the workers are forked: by
        # default USR1 and USR2 end a process and TTIN and TTOU suspend it, and a hot restart's
        # new master loads and warms up while the old workers serve, which stop when it is gone.
        trap_signals(SIGNALS - STOP_SIGNALS)
        @app = @loader.call if @config[:preload]
        warm_up
        trap_signals(STOP_SIGNALS)
        Process.setproctitle("weft master#{" (#{@config[:tag]})" if @config[:tag]}")
        @log.info("weft master #{Process.pid}: #{@count} workers, listening on #{@listeners.map(&:bound_url).join(', ')}")
        @count.times { |index| spawn_worker(index) }
        supervise until @stopping && @workers.empty?
      ensure
        cleanup unless @restarting
      end

      # @return [Array<Listener>]
      attr_reader :listeners

      private

      def inherit_or_bind
        inherited = ENV.delete(LISTEN_FDS)
        if inherited
          inherited.split(",").map do |entry|
            url, fd = entry.split("=", 2)
            Listener.inherit(url, Integer(fd))
          end
        else
          @config.bind_urls.map { |url| Listener.bind(url, backlog: @config[:backlog], reuse_port: @config[:reuse_port]) }
        end
      end

      # The master's handlers. A worker inherits them with the fork and keeps them until it has
      # trapped its own (#run_worker), which can take a while (a library's after-fork hooks
      # run first, the app may load): run in a worker, they only note a stop signal, which the
      # worker acts on once it can. Ruby cannot block signals around a fork, and before, such a
      # signal was queued in the worker's copy of the master's queue and lost: the master's
      # stop then waited shutdown_timeout + 5 s for that worker, and a TERM sent to it alone
      # was ignored.
      def trap_signals(names)
        unless @signal_reader
          @signal_reader, @signal_writer = IO.pipe
          @signals = []
        end
        names.each do |name|
          previous = Signal.trap(name) do
            if Process.pid == @master_pid
              @signals << name
              @signal_writer.write_nonblock(".", exception: false)
            elsif STOP_SIGNALS.include?(name)
              @stop_signal_before_trap ||= name
            end
          end
          next unless name == "HUP" && previous == "IGNORE"
          # Started with HUP ignored (nohup): it stays ignored, in the workers too
          # (Server.trap_stop_signals).
          Signal.trap(name, "IGNORE")
          @hup_ignored = true
        end
      end

      # One turn of the master loop.
      def supervise
        readers = [@signal_reader] + @workers.filter_map(&:pipe)
        ready, = IO.select(readers, nil, nil, 1)
        ready&.each do |io|
          if io.equal?(@signal_reader)
            io.read_nonblock(1024, exception: false)
          else
            worker_message(io)
          end
        end
        handle_signal(@signals.shift) until @signals.empty?
        reap
        check_boot_timeouts
        check_worker_timeouts
        advance_phased_restart
        stop_previous_workers_once_replaced
        maintain_count unless @stopping
      end

      def handle_signal(name)
        case name
        when *STOP_SIGNALS then begin_stop
        when "TTIN"
          @count += 1
          @log.info("TTIN: #{@count} workers")
        when "TTOU"
          @count -= 1 if @count > 1
          @log.info("TTOU: #{@count} workers")
          @workers.select { |worker| worker.index >= @count }.each { |worker| stop_worker(worker) }
        when "USR1" then begin_phased_restart
        when "USR2" then hot_restart
        end
      end

      def spawn_worker(index, generation = @generation)
        settle_heap
        reader, writer = IO.pipe
        @config.run_hooks(:before_fork, index)
        master = Process.pid
        slot = @loads&.claim
        pid = fork { run_worker(index, writer, reader, master, slot) }
        writer.close
        @last_spawn[index] = Timers.now
        worker = Worker.new(index, pid, generation, false, reader, Timers.now, false, nil, false, slot)
        @workers << worker
        worker
      end

      # Runs the `warmup` blocks once, before the first fork, so that the workers inherit the
      # request path compiled (Warmup). They need the app here: without preload each worker loads
      # it itself, from code the master never ran, and the warm-up is skipped with a warning.
      def warm_up
        return if @config[:warmup].empty?
        return Warmup.run(@app, @config, log: @log) if @app
        @log.warn("warmup skipped: it needs preload (the app loaded in the master, where the warm-up runs)")
      end

      # Settles the heap before a fork (ForkHeap), unless no GC ran in the master since the last
      # time. A full GC first: Ruby sweeps lazily, and after a GC triggered by allocation (loading
      # the app and the config does plenty) the heap is left half swept; a worker forked then
      # finishes that sweep at its first GC, writing to pages it shares with the master, each
      # write a page copied. Measured with bench/server/fork_gc.rb (Weft and ringpool loaded,
      # ~66,000 live objects, Ruby 3.1, two runs): the child's first GC took 147-188 ms of CPU,
      # 17-26 ms after one GC.start in the parent. A replacement worker paid that in its first
      # requests, and on a busy machine answered them hundreds of ms late (apps/ringpool's chaos
      # run). Then room: the heap grown to `worker_heap_free` free, so that a worker does not run
      # major GCs by :nofree in its first seconds (ForkHeap says why). It runs again only after the
      # master's own allocations triggered a GC, which is rare once it is up (a select loop and
      # the workers' heartbeats).
      def settle_heap
        return if GC.count == @settled_gc_count
        settled = ForkHeap.settle(free: @config[:worker_heap_free])
        @settled_gc_count = GC.count
        @settled_slots = settled[:after].sum(&:slots)
        log_settled("heap grown by %d slots before forking", settled)
      end

      # A worker that loaded the app itself (no preload) and grew its heap doing so (Ruby sized
      # it as it went) gets the same settling as the master's heap before a fork, before it
      # serves its first request rather than in a major GC among them. One whose heap did not
      # grow (the master loaded the code, the worker little: ringpool) does not: the full GC
      # would cost it 15-16 ms of GC time for nothing (ringpool's chaos run, Ruby 3.1: 25-27
      # replacement workers' GC time 631-665 ms with it, 237-260 ms without).
      # worker_heap_free 0: neither.
      def settle_worker_heap(index)
        free = @config[:worker_heap_free]
        return unless free&.positive? && ForkHeap.pools.sum(&:slots) > @settled_slots
        settled = ForkHeap.settle(free: free)
        log_settled("worker #{index}: heap grown by %d slots before serving", settled)
      end

      def log_settled(what, settled)
        return unless settled[:grown].positive?
        live = settled[:after].sum(&:live)
        slots = settled[:after].sum(&:slots)
        @log.info(format("#{what}: %d live objects in %d slots (worker_heap_free %s), %.0f ms",
                         settled[:grown], live, slots, @config[:worker_heap_free], settled[:seconds] * 1000))
      end

      # The body of a worker process. Never returns. `pipe` carries the boot message and the
      # heartbeat to the master; `slot` is the worker's in the shared WorkerLoads, if any.
      def run_worker(index, pipe, master_end, master, slot)
        master_end.close
        @signal_reader.close
        @signal_writer.close
        @workers.each { |worker| worker.pipe&.close }
        # The master's other signals mean nothing to a worker; a stray USR1/USR2/TTIN sent to
        # the whole process group must not kill (or, for TTIN, suspend) it. The stop signals
        # keep the inherited handlers, which note them (#trap_signals), until the server's own.
        (SIGNALS - STOP_SIGNALS).each do |name|
          Signal.trap(name, MASTER_ONLY_SIGNALS.include?(name) ? "IGNORE" : "DEFAULT")
        end
        $PROGRAM_NAME = "weft worker #{index}#{" (#{@config[:tag]})" if @config[:tag]}"
        status = 0
        begin
          stop_before_boot(index) if @stop_signal_before_trap
          app = @app || @loader.call
          @config.run_hooks(:after_worker_boot, index)
          settle_worker_heap(index) unless @app
          board = Statistics::Board.new(@board_root, index, master_generation: @master_generation)
          spread = slot && AcceptSpread.new(@loads, slot)
          server = Server.new(app, @config, listeners: worker_listeners, worker_index: index, board: board, heartbeat: pipe,
                                            spread: spread)
          Server.trap_stop_signals { server.stop }
          # A stop signal that came while the app loaded: the server stops as soon as it runs,
          # finishing what it accepted by then, as it would have a moment later.
          server.stop if @stop_signal_before_trap
          watch_master(master, server)
          pipe.write("#{Process.pid}\n")
          server.run
          @config.run_hooks(:before_worker_shutdown, index)
        rescue Exception => e # rubocop:disable Lint/RescueException
          Weft.logger.error("worker #{index} failed: #{e.class}: #{e.message}\n\t#{(e.backtrace || []).join("\n\t")}")
          status = 1
        end
        $stdout.flush
        $stderr.flush
        exit!(status) # the master's at_exit handlers are not the worker's
      end

      # A stop signal reached the worker before it trapped its own, and before it loaded
      # anything: it has nothing to finish, and leaves at once. (The master sees a worker that
      # exited, as if the signal had come a moment later.)
      def stop_before_boot(index)
        @log.info("worker #{index} (pid #{Process.pid}): #{@stop_signal_before_trap} before it booted; exiting")
        $stdout.flush
        $stderr.flush
        exit!(0)
      end

      # The shared sockets; with reuse_port, each TCP address is served instead by a socket of
      # this worker's own (the master's is bound but not listening), and the kernel hashes new
      # connections evenly over the workers. The price: connections queued on a worker's socket
      # are reset when that worker stops (restarts can lose a few, see docs/server.md).
      def worker_listeners
        return @listeners unless @config[:reuse_port]
        @listeners.map { |listener| listener.reuse_port_sibling(@config[:backlog]) || listener }
      end

      # The table where workers publish their open connections for AcceptSpread, made before the
      # first fork so that every worker shares it: with `spread_connections` (the default), unless
      # `reuse_port` gives each worker a listening socket of its own, whose connections only it
      # can take. Slots for twice the most workers there can be, so that a phased restart's
      # replacements and workers not yet reaped have one too.
      def worker_loads
        return nil unless @config[:spread_connections] && !@config[:reuse_port]
        WorkerLoads.new(2 * SettingRules::MAX_WORKERS)
      end

      # A worker whose master died (SIGKILL, crash) stops on its own rather than live on.
      def watch_master(master, server)
        Thread.new do
          sleep(1) while Process.ppid == master
          server.stop
        end
      end

      # A worker wrote to its pipe (its boot message, heartbeats) or closed it (exited).
      def worker_message(pipe)
        worker = @workers.find { |candidate| candidate.pipe.equal?(pipe) }
        data = pipe.read_nonblock(4096, exception: false)
        return if data == :wait_readable
        if data.nil?
          pipe.close
          worker.pipe = nil if worker
          return
        end
        return unless worker
        worker.last_beat = Timers.now
        return if worker.booted || !data.include?("\n")
        worker.booted = true
        @log.info("worker #{worker.index} (pid #{worker.pid}) booted")
      end

      def reap
        loop do
          pid, status = Process.wait2(-1, Process::WNOHANG)
          break unless pid
          # Its last statistics leave /stats (a removed or replaced worker's, a previous one's).
          Statistics::Board.remove(@board_root, pid)
          previous_worker_exited(pid)
          worker = @workers.find { |candidate| candidate.pid == pid }
          next unless worker
          @workers.delete(worker)
          worker.pipe&.close
          @loads.release(worker.slot) if worker.slot
          unless worker.stopping || @stopping
            @log.warn("worker #{worker.index} (pid #{pid}) died: #{status.inspect}; replacing it")
          end
        end
      rescue Errno::ECHILD
        @previous_workers.dup.each { |pid| previous_worker_exited(pid) } # no child left
      end

      # Once the previous master generation's last worker has exited, its directory goes.
      def previous_worker_exited(pid)
        return unless @previous_workers.delete(pid) && @previous_workers.empty?
        Statistics::Board.remove_other_generations(@board_root, @master_generation)
      end

      def maintain_count
        (0...@count).each do |index|
          next if @workers.any? { |worker| worker.index == index }
          # A worker that dies at boot is not respawned in a tight loop.
          last = @last_spawn[index]
          next if last && Timers.now - last < 1
          spawn_worker(index)
        end
      end

      def check_boot_timeouts
        limit = @config[:worker_boot_timeout]
        @workers.each do |worker|
          next if worker.booted || worker.killed || Timers.now - worker.started_at < limit
          kill_worker(worker, "did not boot in #{limit}s")
        end
      end

      # A booted worker that has not beaten for worker_timeout seconds has a stuck reactor
      # (its stall detector has logged where, after half that time): SIGKILL, since a stuck
      # reactor cannot run a graceful stop; the slot is refilled by #maintain_count.
      def check_worker_timeouts
        limit = @config[:worker_timeout]
        now = Timers.now
        @workers.each do |worker|
          next unless worker.booted && !worker.killed && now - worker.last_beat > limit
          kill_worker(worker, "unresponsive: its reactor has not turned for #{format('%.1f', now - worker.last_beat)}s " \
                              "(worker_timeout #{limit}s)")
        end
      end

      def kill_worker(worker, reason)
        @log.error("worker #{worker.index} (pid #{worker.pid}) #{reason}; killing it#{' and starting a replacement' unless @stopping}")
        kill(worker.pid, "KILL")
        worker.killed = true
        worker.stopping = true
      end

      def stop_worker(worker)
        return if worker.stopping
        worker.stopping = true
        kill(worker.pid, "TERM")
      end

      def kill(pid, signal)
        Process.kill(signal, pid)
      rescue Errno::ESRCH
        nil
      end

      def begin_stop
        return if @stopping
        @stopping = true
        @log.info("stopping: waiting up to #{@config[:shutdown_timeout]}s for in-flight requests")
        @listeners.each(&:close) # no worker needs the master's copies any more
        @workers.each { |worker| stop_worker(worker) }
        # A hot restart's previous workers too: they are this process's children, and would
        # otherwise drain on after it, with no master.
        stop_previous_workers
        deadline = Timers.now + @config[:shutdown_timeout] + 5
        until (@workers.empty? && @previous_workers.empty?) || Timers.now > deadline
          reap
          sleep(0.05) unless @workers.empty? && @previous_workers.empty?
        end
        (@workers.map(&:pid) + @previous_workers).each { |pid| kill(pid, "KILL") }
        reap
        @workers.clear
      end

      # --- Phased restart (USR1) -----------------------------------------------------------

      def begin_phased_restart
        return if @phased || @stopping
        @generation += 1
        @log.info("phased restart to generation #{@generation}")
        @phased = { queue: @workers.reject(&:stopping).sort_by(&:index), current: nil, replacement: nil }
      end

      # Replaces one worker at a time: start the new one, wait until it has booted, then stop
      # the old one and wait for it to exit. At every moment at least @count workers accept.
      def advance_phased_restart
        return unless @phased
        phased = @phased
        if phased[:current]
          old = phased[:current]
          replacement = phased[:replacement]
          stop_worker(old) if replacement.booted && !old.stopping
          return if @workers.include?(old) # still draining
          unless @workers.include?(replacement)
            @log.error("phased restart: replacement for worker #{old.index} died; stopping the restart")
            @phased = nil
            return
          end
          phased[:current] = nil
        end
        old = phased[:queue].shift
        if old.nil?
          @log.info("phased restart done")
          @phased = nil
          return
        end
        phased[:current] = old
        phased[:replacement] = spawn_worker(old.index, @generation)
      end

      # --- Hot restart (USR2) --------------------------------------------------------------

      # Re-executes the master image in place (same pid) with the listening sockets passed as
      # fds. The old workers remain its children and keep serving until the new master's
      # workers have booted; the new master then stops them (#stop_previous_workers_once_replaced).
      #
      # A stop signal must not be lost with the image the exec replaces. One queued by now (sent
      # with the USR2, or while the on_restart hooks ran) stops the cluster instead of the exec;
      # from here on the stop signals are left to the system's default, which ends the master
      # (this image or the new one until its Ruby has trapped them, then Ruby's default until
      # Cluster#run's, which ends it too), and the previous workers, their master gone, finish
      # their requests and exit (#watch_master). Before, a TERM queued here was dropped, and
      # the new master served on.
      def hot_restart
        return if @stopping || @argv.nil?
        @config.run_hooks(:on_restart)
        env = {
          LISTEN_FDS => @listeners.map { |listener| "#{listener.url}=#{listener.socket.fileno}" }.join(","),
          # The previous generations' workers still draining too: the new master waits for them.
          OLD_WORKERS => (@workers.map(&:pid) + @previous_workers).join(","),
          MASTER_GENERATION => (@master_generation + 1).to_s
        }
        redirects = @listeners.to_h { |listener| [listener.socket.fileno, listener.socket.fileno] }
        MASTER_ONLY_SIGNALS.each { |name| Signal.trap(name, "IGNORE") }
        stop_signals_to_system_default
        if (stop = @signals.find { |name| STOP_SIGNALS.include?(name) })
          restore_signal_handlers
          return @log.info("hot restart given up for the #{stop} that came first")
        end
        @log.info("hot restart: re-executing #{@argv.join(' ')}")
        @restarting = true
        exec(env, *@argv, redirects.merge(close_others: false))
      rescue SystemCallError => e
        @restarting = false
        restore_signal_handlers
        @log.error("hot restart failed: #{e.message}; continuing with the current master")
      end

      def stop_signals_to_system_default
        STOP_SIGNALS.each { |name| Signal.trap(name, "SYSTEM_DEFAULT") unless name == "HUP" && @hup_ignored }
      end

      # No exec after all: this master goes on, with its handlers (a queued stop signal is
      # handled next, by #supervise).
      def restore_signal_handlers
        trap_signals(MASTER_ONLY_SIGNALS + STOP_SIGNALS)
      end

      # Once this master's workers have all booted, the previous ones are no longer needed.
      def stop_previous_workers_once_replaced
        stop_previous_workers if @workers.count(&:booted) >= @count
      end

      # Tells the previous workers still there to stop, once (the TERM of a graceful stop). They
      # stay this process's children: #reap collects them as they exit.
      def stop_previous_workers
        return if @previous_workers_stopping || @previous_workers.empty?
        @previous_workers_stopping = true
        @log.info("hot restart: stopping the previous workers #{@previous_workers.join(', ')}") unless @stopping
        @previous_workers.each { |pid| kill(pid, "TERM") }
      end

      def write_pidfile
        path = @config[:pidfile]
        File.write(path, "#{Process.pid}\n") if path
      end

      def cleanup
        @listeners&.each do |listener|
          listener.close
          listener.unlink
        end
        FileUtils.rm_rf(@board_root) if @board_root
        File.unlink(@config[:pidfile]) if @config[:pidfile] && File.exist?(@config[:pidfile])
      end
    end
  end
end
