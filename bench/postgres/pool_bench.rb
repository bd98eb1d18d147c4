# frozen_string_literal: true

# `select 1` from 100 fibers over 4 connections: Weft::Postgres::Pool pipelined vs not, with
# pgbench (libpq in C) on the same 4 connections as the limit, plain and pipelined.
#
#   bundle exec ruby bench/postgres/pool_bench.rb [seconds]   # prints a Markdown section
#
# Each contender runs for `seconds` (default 5) after a 1 s warm-up; the figure is statements
# completed per second.

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

    def run(seconds)
      url = PostgresBench.database[:url]
      rows = []
      rows << ["Weft pool, pipelined", weft(url, seconds, pipelining: true)]
      rows << ["Weft pool, not pipelined", weft(url, seconds, pipelining: false)]
      rows << ["pgbench (C), 4 clients", pgbench(seconds, pipelined: false)]
      rows << ["pgbench (C), 4 clients, pipelined", pgbench(seconds, pipelined: true)]
      rows
    end

    # Statements per second from FIBERS fibers looping `select 1` through one pool.
    def weft(url, seconds, pipelining:)
      pool = Weft::Postgres::Pool.new(url, limit: CONNECTIONS, pipelining: pipelining)
      count, elapsed = select_one_loop(pool, seconds)
      count / elapsed
    ensure
      pool&.close
    end

    # Runs FIBERS fibers looping `select 1` through `pool`: a 1 s warm-up (connections opened,
    # caches hot), then `seconds` measured. A block given gets a callable that waits out the
    # measured part, to wrap it (pool_profile.rb takes counters and profiles around it).
    # @return [Array(Integer, Float)] statements completed while measuring, and the seconds
    def select_one_loop(pool, seconds)
      count = 0
      elapsed = nil
      Weft.run do
        deadline = nil
        measuring = false
        workers = Array.new(FIBERS) do
          Weft.spawn do
            until deadline && PostgresBench.now >= deadline
              pool.query("select 1")
              count += 1 if measuring
            end
          end
        end
        sleep 1
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

    # Statements per second from pgbench with a `select 1` script over CONNECTIONS clients.
    def pgbench(seconds, pipelined:)
      script = Tempfile.new(["select1", ".sql"])
      per_transaction = pipelined ? PIPELINE_BATCH : 1
      script.write(pipelined ? "\\startpipeline\n#{"select 1;\n" * PIPELINE_BATCH}\\endpipeline\n" : "select 1;\n")
      script.flush
      db = PostgresBench.database
      command = ["pgbench", "-n", "-M", "extended", "-c", CONNECTIONS.to_s, "-j", "2", "-T", seconds.to_s,
                 "-f", script.path, db[:url]]
      out, status = Open3.capture2e(*command)
      raise "pgbench failed: #{out}" unless status.success?
      tps = out[/tps = ([\d.]+)/, 1].to_f
      tps * per_transaction
    ensure
      script&.close!
    end

    def report(seconds)
      rows = run(seconds)
      pipelined, plain = rows[0].last, rows[1].last
      <<~MARKDOWN
        ## `select 1`: #{FIBERS} fibers over #{CONNECTIONS} connections

        Command: `bundle exec ruby bench/postgres/pool_bench.rb #{seconds}` (each contender
        #{seconds} s after a 1 s warm-up; pgbench `-M extended -c #{CONNECTIONS} -j 2`, pipelined
        script = #{PIPELINE_BATCH} statements per `\\startpipeline`/`\\endpipeline`).

        | contender | statements/s | vs Weft not pipelined |
        |---|---:|---:|
        #{rows.map { |label, value| "| #{label} | #{PostgresBench.format_number(value)} | #{format('%.2fx', value / plain)} |" }.join("\n")}

        ```
        #{PostgresBench.bars(rows, unit: " stmt/s")}
        ```

        Pipelined / not pipelined: **#{format('%.2fx', pipelined / plain)}** (target: at least 5x).
      MARKDOWN
    end
  end
end

if $PROGRAM_NAME == __FILE__
  seconds = Integer(ARGV.fetch(0, 5))
  puts PostgresBench::PoolBench.report(seconds)
end
