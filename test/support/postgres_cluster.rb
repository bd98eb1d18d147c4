# frozen_string_literal: true

require "etc"
require "fileutils"
require "open3"
require "socket"
require "tmpdir"

module Weft
  module Test
    # A private, throwaway PostgreSQL cluster for tests: its own data directory in a temporary
    # folder, its own TCP port on 127.0.0.1, its own unix socket folder, trust authentication,
    # superuser `postgres`, and settings that trade durability for speed.
    #
    #   pg = Weft::Test::PostgresCluster.shared   # one per process, started on first use
    #   pg.url        # => "postgres://postgres@127.0.0.1:54123/postgres"
    #   pg.conninfo   # => "host=127.0.0.1 port=54123 user=postgres dbname=postgres"
    #   pg.psql("select 1 as one")  # => [{"one" => "1"}]
    #   pg.restart(mode: :immediate)
    #
    # PostgreSQL refuses to run as root, so under root the server programs run as the `postgres`
    # system user (or a `weftpg` system user made on the spot) through runuser.
    #
    # Server programs are looked up in WEFT_PG_BIN, then PATH (initdb), then the newest
    # /usr/lib/postgresql/<version>/bin. Every instance is stopped and deleted at exit; a cluster
    # left behind by a killed run is cleaned up by the next run.
    class PostgresCluster
      class Error < StandardError; end

      SUPERUSER = "postgres"
      PREFIX = "weft-pg-"
      MAX_SOCKET_PATH = 107 # sun_path is 108 bytes including the NUL

      SETTINGS = {
        "listen_addresses" => "'127.0.0.1'",
        "fsync" => "off",
        "synchronous_commit" => "off",
        "full_page_writes" => "off",
        "wal_level" => "minimal",
        "max_wal_senders" => "0",
        "max_connections" => "300",
        "shared_buffers" => "32MB",
        "jit" => "off",
        "logging_collector" => "off",
        "log_min_messages" => "warning",
        "log_timezone" => "'UTC'",
        "timezone" => "'UTC'",
      }.freeze

      @registry = []
      @registry_lock = Mutex.new
      @shared = nil
      @shared_lock = Mutex.new
      @swept = false

      class << self
        # The process-wide cluster, started on first use, stopped at exit.
        def shared
          @shared_lock.synchronize do
            @shared ||= new.tap { |cluster| isolated { cluster.start } }
          end
        end

        # The folder holding initdb, pg_ctl and postgres, or nil when PostgreSQL is not installed.
        def bin_dir
          candidates = []
          candidates << ENV["WEFT_PG_BIN"] if ENV["WEFT_PG_BIN"] && !ENV["WEFT_PG_BIN"].empty?
          ENV.fetch("PATH", "").split(File::PATH_SEPARATOR).each do |dir|
            path = File.join(dir, "initdb")
            candidates << File.dirname(File.realpath(path)) if File.file?(path) && File.executable?(path)
          end
          candidates.concat(
            Dir["/usr/lib/postgresql/*/bin"].sort_by { |d| d[%r{/(\d+(?:\.\d+)?)/bin\z}, 1].to_f }.reverse,
          )
          candidates.find { |dir| %w[initdb pg_ctl postgres].all? { |p| File.executable?(File.join(dir, p)) } }
        end

        def register(cluster)
          @registry_lock.synchronize do
            install_exit_hook if @registry.empty? && !@exit_hook
            @registry << cluster
          end
        end

        def unregister(cluster)
          @registry_lock.synchronize { @registry.delete(cluster) }
        end

        # Stops and deletes every cluster this process made.
        def destroy_all(mode: :fast)
          clusters = @registry_lock.synchronize { @registry.dup }
          clusters.each do |cluster|
            cluster.destroy(mode: mode)
          rescue StandardError => e
            warn "weft test: could not remove PostgreSQL cluster #{cluster.base_dir}: #{e.message}"
          end
        end

        # Removes clusters left in the temp folders by test processes that no longer exist.
        def sweep_leftovers
          return if @swept

          @swept = true
          [Dir.tmpdir, "/tmp"].uniq.each do |tmp|
            Dir.glob(File.join(tmp, "#{PREFIX}*")).each { |dir| sweep(dir) }
          end
        end

        # Runs the block in a new thread and waits for it, so that process spawning and waiting
        # never goes through a Fiber scheduler the calling test may have set on its own thread.
        def isolated(&block)
          return yield if Fiber.respond_to?(:scheduler) && Fiber.scheduler.nil?

          Thread.new(&block).value
        end

        private

        def install_exit_hook
          @exit_hook = true
          pid = Process.pid
          at_exit { destroy_all(mode: :fast) if Process.pid == pid }
          if defined?(Weft::Test::Watchdog)
            Weft::Test::Watchdog.on_abort { destroy_all(mode: :immediate) }
          end
        end

        def sweep(dir)
          owner = Integer(File.read(File.join(dir, "owner.pid")).strip, exception: false)
          return if owner && process_alive?(owner)
          return unless File.owned?(dir) || Process.uid.zero?

          data = File.join(dir, "data")
          if File.exist?(File.join(data, "postmaster.pid")) && (bin = bin_dir)
            user = File.stat(data).uid
            cmd = [File.join(bin, "pg_ctl"), "stop", "-D", data, "-m", "immediate", "-w", "-t", "30"]
            cmd = ["runuser", "-u", Etc.getpwuid(user).name, "--", *cmd] if Process.uid.zero? && user != 0
            Open3.capture2e(*cmd, chdir: "/")
          end
          FileUtils.rm_rf(dir)
        rescue StandardError => e
          warn "weft test: could not clean up stale PostgreSQL cluster #{dir}: #{e.message}"
        end

        def process_alive?(pid)
          Process.kill(0, pid)
          # A killed process can linger as a zombie until its parent reaps it.
          stat = File.read("/proc/#{pid}/stat") rescue nil # rubocop:disable Style/RescueModifier
          !(stat && stat.rpartition(") ").last.start_with?("Z"))
        rescue Errno::ESRCH
          false
        rescue Errno::EPERM
          true
        end
      end

      attr_reader :port, :host, :base_dir, :data_dir, :socket_dir, :log_file, :bin_dir

      # @param keep_in [String, nil] a folder to keep the cluster in across runs (bin/demo's):
      #   created with the cluster on the first start, reused by later ones, never deleted nor
      #   stopped at exit (its owner stops it). nil: a throwaway cluster in a temporary folder.
      def initialize(bin_dir: self.class.bin_dir, port: nil, keep_in: nil)
        @keep_in = keep_in && File.expand_path(keep_in)
        @bin_dir = bin_dir or raise Error,
                                    "PostgreSQL server programs (initdb, pg_ctl, postgres) not found in " \
                                    "WEFT_PG_BIN, PATH or /usr/lib/postgresql/*/bin; run bin/setup"
        @host = "127.0.0.1"
        @requested_port = port
        @port = nil
        @initialized = false
        @running = false
        @lock = Mutex.new
      end

      def url(dbname = "postgres")
        "postgres://#{SUPERUSER}@#{host}:#{port}/#{dbname}"
      end

      def conninfo(dbname = "postgres")
        "host=#{host} port=#{port} user=#{SUPERUSER} dbname=#{dbname}"
      end

      # libpq parameters for the unix socket.
      def socket_conninfo(dbname = "postgres")
        "host=#{socket_dir} port=#{port} user=#{SUPERUSER} dbname=#{dbname}"
      end

      def running?
        @running
      end

      # Creates the cluster on first call, then starts the server. No-op when already running.
      def start
        @lock.synchronize do
          return self if @running

          unless @initialized
            self.class.sweep_leftovers unless @keep_in
            create_cluster
          end
          start_server
        end
        self
      end

      # Stops the server and keeps the data; `start` brings it back on the same port.
      # mode: :smart, :fast (disconnects clients) or :immediate (like a crash).
      def stop(mode: :fast)
        @lock.synchronize do
          return self unless @running

          pg_ctl("stop", "-m", mode.to_s, "-w", "-t", "60")
          @running = false
        end
        self
      end

      def restart(mode: :fast)
        stop(mode: mode)
        start
      end

      # Restarts the server in a child process without waiting for it (`pg_ctl restart -w`,
      # which keeps the settings and port): the caller waits for the returned pid with
      # Process.wait, which a fiber scheduler turns into a wait of its own. For a test whose
      # clients run in this process and must not stall meanwhile (#restart runs pg_ctl from a
      # thread under a scheduler, and that thread's turns on the interpreter lock stall them).
      # @return [Integer] the pid of pg_ctl; it exits 0 once the server accepts connections again
      def spawn_restart(mode: :fast)
        cmd = [File.join(bin_dir, "pg_ctl"), "restart", "-m", mode.to_s, "-w", "-t", "60", "-D", @data_dir]
        cmd = ["runuser", "-u", run_as, "--", *cmd] if run_as
        Process.spawn({ "LC_ALL" => "C" }, *cmd, chdir: @base_dir, in: File::NULL, %i[out err] => [@log_file, "a"])
      end

      # Stops the server and deletes the whole cluster.
      def destroy(mode: :fast)
        begin
          stop(mode: mode) if @running
        rescue Error
          stop(mode: :immediate) if @running
        end
        FileUtils.rm_rf(@base_dir) if @base_dir
        @initialized = false
        self.class.unregister(self)
        self
      end

      # Creates a database (unless it exists) and returns its URL.
      def create_database(name)
        literal = "'#{name.to_s.gsub("'", "''")}'"
        exists = psql("SELECT 1 FROM pg_database WHERE datname = #{literal}")
        psql("CREATE DATABASE #{PG::Connection.quote_ident(name.to_s)}") if exists.empty?
        url(name)
      end

      # Runs SQL through the pg gem (not the psql program) and returns the rows of the last
      # statement as hashes of strings.
      def psql(sql, dbname: "postgres")
        self.class.isolated do
          conn = PG.connect(conninfo(dbname))
          begin
            conn.exec(sql).to_a
          ensure
            conn.close
          end
        end
      end

      # A new PG::Connection (closed after the block when one is given).
      def connect(dbname = "postgres", **params)
        require "pg"
        conn = PG.connect(host: host, port: port, user: SUPERUSER, dbname: dbname, **params)
        return conn unless block_given?

        begin
          yield conn
        ensure
          conn.close
        end
      end

      # Runs the block while a thread counts, every 10 ms, the backends of pg_stat_activity that
      # `where` (an SQL condition, with $1... for `params`) selects, on a connection of its own
      # to `from` (leave it out of the condition, or it counts itself).
      # @return [Array<Integer>] the counts seen
      def count_backends_while(where, params, from: "postgres")
        counts = []
        done = false
        watcher = Thread.new do
          connect(from) do |conn|
            until done
              counts << conn.exec_params("select count(*) from pg_stat_activity where #{where}", params).getvalue(0, 0).to_i
              sleep 0.01
            end
          end
        end
        yield
        counts
      ensure
        done = true
        watcher&.join
      end

      # The server log, for failure messages.
      def log_tail(lines = 40)
        return "" unless @log_file && File.exist?(@log_file)

        File.readlines(@log_file).last(lines).join
      end

      def inspect
        "#<#{self.class} #{url} dir=#{@base_dir} running=#{@running}>"
      end

      private

      def run_as
        return nil unless Process.uid.zero?

        @run_as ||= begin
          Etc.getpwnam(SUPERUSER).name
        rescue ArgumentError
          ensure_user("weftpg")
        end
      end

      def ensure_user(name)
        Etc.getpwnam(name).name
      rescue ArgumentError
        out, status = Open3.capture2e("useradd", "--system", "--no-create-home", "--home-dir", "/nonexistent",
                                      "--shell", "/usr/sbin/nologin", name)
        raise Error, "could not create system user #{name}: #{out}" unless status.success?

        name
      end

      def make_base_dir
        # Under root the server user must reach the folder, so keep it in /tmp; otherwise
        # honour TMPDIR unless the socket path would be too long.
        parent = Process.uid.zero? ? "/tmp" : Dir.tmpdir
        dir = Dir.mktmpdir(PREFIX, parent)
        if File.join(dir, "sock", ".s.PGSQL.65535").bytesize > MAX_SOCKET_PATH
          FileUtils.rm_rf(dir)
          dir = Dir.mktmpdir(PREFIX, "/tmp")
        end
        File.write(File.join(dir, "owner.pid"), "#{Process.pid}\n")
        dir
      end

      def create_cluster
        require "pg"
        @base_dir = @keep_in || make_base_dir
        self.class.register(self) unless @keep_in
        @data_dir = File.join(@base_dir, "data")
        @socket_dir = File.join(@base_dir, "sock")
        @log_file = File.join(@base_dir, "postgres.log")
        return @initialized = true if @keep_in && File.exist?(File.join(@data_dir, "PG_VERSION"))

        FileUtils.mkdir_p(@base_dir)
        FileUtils.mkdir_p(@socket_dir, mode: 0o700)
        FileUtils.touch(@log_file)
        if (user = run_as)
          pw = Etc.getpwnam(user)
          FileUtils.chown_R(pw.uid, pw.gid, @base_dir)
        end

        run!(File.join(bin_dir, "initdb"), "-D", @data_dir, "-U", SUPERUSER, "--auth=trust",
             "-E", "UTF8", "--no-locale", "--no-sync", "--no-instructions")
        @initialized = true
      end

      def start_server
        # The first start picks a port; later starts (after stop/restart) keep it so URLs stay valid.
        fixed = @requested_port || @port
        attempts = 0
        begin
          attempts += 1
          @port = fixed || free_port
          write_settings
          pg_ctl("start", "-w", "-t", "60", "-l", @log_file)
          @running = true
        rescue Error
          # Most likely someone took the port between our check and the server's bind.
          raise if fixed || attempts >= 3

          retry
        end
      end

      def free_port
        server = TCPServer.new(host, 0)
        server.addr[1]
      ensure
        server&.close
      end

      def write_settings
        settings = SETTINGS.merge(
          "port" => @port.to_s,
          "unix_socket_directories" => "'#{@socket_dir}'",
        )
        File.write(File.join(@data_dir, "postgresql.auto.conf"),
                   settings.map { |k, v| "#{k} = #{v}\n" }.join)
      end

      def pg_ctl(*args)
        run!(File.join(bin_dir, "pg_ctl"), *args, "-D", @data_dir)
      end

      def run!(*cmd)
        cmd = ["runuser", "-u", run_as, "--", *cmd] if run_as
        out, status = self.class.isolated do
          Open3.capture2e({ "LC_ALL" => "C" }, *cmd, chdir: @base_dir, in: File::NULL)
        end
        return out if status.success?

        raise Error, "#{cmd.join(' ')} failed (#{status}):\n#{out}\n--- server log #{@log_file}:\n#{log_tail}"
      end
    end
  end
end
