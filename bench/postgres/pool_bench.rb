# frozen_string_literal: true

# `select 1` from 100 fibers over 4 connections: Weft::Postgres::Pool pipelined vs not, with
# pgbench (libpq in C) on the same 4 connections as the limit, plain and pipelined, the
# pipelined script with unnamed statements (`-M extended`) and with named prepared ones
# (`-M prepared`, the fair yardstick once the pool prepares repeated texts).
#
#   bundle exec ruby bench/postgres/pool_bench.rb [seconds]          # prints a Markdown section
#   bundle exec ruby bench/postgres/pool_bench.rb [seconds] unique   # every statement's text new
#
# Each contender runs for `seconds` (default 5) after a 1 s warm-up; the figure is statements
# completed per second. With `unique` the fibers send `select <n>` with a number never sent
# before (a text built per call, as SQL with its values written in is): what tracking the
# texts seen costs a pool whose texts never repeat, Weft only.
#
# Beside each rate goes the CPU time a statement cost (user + system, µs): the client's (this
# process over the measured seconds for Weft, pgbench's process for pgbench) and the server's
# (its backends and other processes, ServerCpu), which on a machine shared with other work say
# more than the rates do, and show whether both sides got the same budget (Weft's client is
# one thread; pgbench's `-j 2` is two, of which it uses a fraction).

require_relative "support"
require "tempfile"
require "weft/postgres"

module PostgresBench
  # The pool-level benchmark.
  module PoolBench
    FIBERS = 100
    CONNECTIONS = 4
    PIPELINE_BATCH = 25 # statements per \startpipeline ... \endpipeline in the pgbench script

    module_function

    # @return [Array<Array(String, Float, Float, Float)>] per contender: its label, statements
    #   per second, and client and server CPU µs per statement (nil where not measured)
    def run(seconds, unique: false)
      url = PostgresBench.database[:url]
      rows = []
      rows << ["Weft pool, pipelined", *weft(url, seconds, pipelining: true, unique: unique)]
      rows << ["Weft pool, not pipelined", *weft(url, seconds, pipelining: false, unique: unique)]
      return rows if unique

      rows << ["pgbench (C), 4 clients", *pgbench(seconds, pipelined: false)]
      rows << ["pgbench (C), 4 clients, pipelined", *pgbench(seconds, pipelined: true)]
      rows << ["pgbench (C), 4 clients, pipelined, -M prepared", *pgbench(seconds, pipelined: true, mode: "prepared")]
      rows
    end

    # Statements per second from FIBERS fibers looping `select 1` (or unique texts) through
    # one pool, and the client's and server's CPU µs per statement while measuring.
    # @return [Array(Float, Float, Float)]
    def weft(url, seconds, pipelining:, unique: false)
      pool = Weft::Postgres::Pool.new(url, limit: CONNECTIONS, pipelining: pipelining)
      server = ServerCpu.new(url)
      client = server_seconds = nil
      count, elapsed = select_one_loop(pool, seconds, unique: unique) do |measured|
        client = Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID)
        server_seconds = server.seconds
        measured.call
        client = Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID) - client
        server_seconds = server.seconds&.-(server_seconds)
      end
      [count / elapsed, client * 1e6 / count, server_seconds&.*(1e6 / count)]
    ensure
      pool&.close
    end

    # Runs FIBERS fibers looping `select 1` through `pool`: a warm-up of `warm_up` seconds
    # (connections opened, caches hot), then `seconds` measured. A block given gets a callable
    # that waits out the measured part, to wrap it (pool_profile.rb takes counters and profiles
    # around it).
    # @return [Array(Integer, Float)] statements completed while measuring, and the seconds
    def select_one_loop(pool, seconds, unique: false, warm_up: 1)
      serial = 0
      count = 0
      elapsed = nil
      Weft.run do
        deadline = nil
        measuring = false
        workers = Array.new(FIBERS) do
          Weft.spawn do
            until deadline && PostgresBench.now >= deadline
              if unique
                pool.query("select #{serial += 1}")
              else
                pool.query("select 1")
              end
              count += 1 if measuring
            end
          end
        end
        sleep warm_up
        count = 0
        measuring = true
        started = PostgresBench.now
        deadline = started + seconds
        measured = -> { Weft.gather(workers) }
        block_given? ? yield(measured) : measured.call
        elapsed = PostgresBench.now - started
      end
      [count, elapsed]
    end

    # Statements per second from pgbench with a `select 1` script over CONNECTIONS clients, and
    # pgbench's and the server's CPU µs per statement over the run.
    # @return [Array(Float, Float, Float)]
    def pgbench(seconds, pipelined:, mode: "extended")
      script = Tempfile.new(["select1", ".sql"])
      per_transaction = pipelined ? PIPELINE_BATCH : 1
      script.write(pipelined ? "\\startpipeline\n#{"select 1;\n" * PIPELINE_BATCH}\\endpipeline\n" : "select 1;\n")
      script.flush
      db = PostgresBench.database
      command = ["pgbench", "-n", "-M", mode, "-c", CONNECTIONS.to_s, "-j", "2", "-T", seconds.to_s,
                 "-f", script.path, db[:url]]
      server = ServerCpu.new(db[:url])
      server_before = server.seconds
      before = Process.times
      out, status = Open3.capture2e(*command)
      after = Process.times
      raise "pgbench failed: #{out}" unless status.success?
      server_seconds = server.seconds_after_backends_end&.-(server_before)
      statements = out[/number of transactions actually processed: (\d+)/, 1].to_f * per_transaction
      client = after.cutime + after.cstime - before.cutime - before.cstime
      [out[/tps = ([\d.]+)/, 1].to_f * per_transaction, client * 1e6 / statements, server_seconds&.*(1e6 / statements)]
    ensure
      script&.close!
    end

    # The CPU time the PostgreSQL server has used so far (user + system), on Linux with the
    # server on this machine: its postmaster's children that run (backends, background
    # processes) and those it has reaped (a backend whose client left), from /proc. The backends
    # are the server's processes that a pool's statements cost; nil where it cannot be read.
    class ServerCpu
      # @param url [String] the server, asked for its data directory (a superuser's connection)
      def initialize(url)
        connection = PG.connect(url)
        pid_file = File.join(connection.exec("show data_directory").getvalue(0, 0), "postmaster.pid")
        @postmaster = Integer(File.read(pid_file).lines.first)
        @tick = Float(Etc.sysconf(Etc::SC_CLK_TCK))
      rescue PG::Error, SystemCallError, ArgumentError
        @postmaster = nil # not local, or not readable
      ensure
        connection&.close
      end

      # @return [Float, nil] seconds of CPU used by the server's processes so far
      def seconds
        return nil unless @postmaster
        # /proc/PID/stat after the command's closing parenthesis: state is field 0, ppid 1,
        # utime 11, stime 12, cutime 13, cstime 14.
        postmaster = stat(@postmaster) or return nil
        ticks = postmaster[13].to_i + postmaster[14].to_i
        Dir.glob("/proc/[0-9]*/stat") do |path|
          fields = stat(path) or next
          ticks += fields[11].to_i + fields[12].to_i if fields[1].to_i == @postmaster
        end
        ticks / @tick
      end

      # #seconds once the backends of clients that have left are reaped: until then a
      # backend that has exited counts neither as running nor as reaped.
      def seconds_after_backends_end
        sleep 0.5
        seconds
      end

      private

      def stat(pid_or_path)
        path = pid_or_path.is_a?(Integer) ? "/proc/#{pid_or_path}/stat" : pid_or_path
        File.read(path).split(") ", 2).last.split
      rescue SystemCallError
        nil # gone meanwhile
      end
    end

    def report(seconds, unique: false)
      rows = run(seconds, unique: unique)
      pipelined, plain = rows[0][1], rows[1][1]
      yardsticks = unique ? "" : <<~MARKDOWN
        Pipelined, of pgbench pipelined: #{format('%.1f%%', 100 * pipelined / rows[3][1])} of `-M extended`,
        #{format('%.1f%%', 100 * pipelined / rows[4][1])} of `-M prepared`.
      MARKDOWN
      cpu = ->(value) { value ? format("%.2f", value) : "n/a" }
      <<~MARKDOWN
        ## `#{unique ? 'select <n>, every text new' : 'select 1'}`: #{FIBERS} fibers over #{CONNECTIONS} connections

        Command: `bundle exec ruby bench/postgres/pool_bench.rb #{seconds}#{' unique' if unique}` (each contender
        #{seconds} s after a 1 s warm-up; pgbench `-M extended -c #{CONNECTIONS} -j 2` and pipelined also
        `-M prepared`, pipelined script = #{PIPELINE_BATCH} statements per `\\startpipeline`/`\\endpipeline`).

        | contender | statements/s | vs Weft not pipelined | client CPU µs/statement | server CPU µs/statement |
        |---|---:|---:|---:|---:|
        #{rows.map { |label, value, client, server| "| #{label} | #{PostgresBench.format_number(value)} | #{format('%.2fx', value / plain)} | #{cpu[client]} | #{cpu[server]} |" }.join("\n")}

        ```
        #{PostgresBench.bars(rows.map { |label, value| [label, value] }, unit: " stmt/s")}
        ```

        Pipelined / not pipelined: **#{format('%.2fx', pipelined / plain)}** (target: at least 5x).
        #{yardsticks}
      MARKDOWN
    end
  end
end

if $PROGRAM_NAME == __FILE__
  seconds = Integer(ARGV.fetch(0, 5))
  puts PostgresBench::PoolBench.report(seconds, unique: ARGV[1] == "unique")
end
