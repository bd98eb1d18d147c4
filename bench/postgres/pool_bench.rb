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

    def run(seconds, unique: false)
      url = PostgresBench.database[:url]
      rows = []
      rows << ["Weft pool, pipelined", weft(url, seconds, pipelining: true, unique: unique)]
      rows << ["Weft pool, not pipelined", weft(url, seconds, pipelining: false, unique: unique)]
      return rows if unique

      rows << ["pgbench (C), 4 clients", pgbench(seconds, pipelined: false)]
      rows << ["pgbench (C), 4 clients, pipelined", pgbench(seconds, pipelined: true)]
      rows << ["pgbench (C), 4 clients, pipelined, -M prepared", pgbench(seconds, pipelined: true, mode: "prepared")]
      rows
    end

    # Statements per second from FIBERS fibers looping `select 1` (or unique texts) through
    # one pool.
    def weft(url, seconds, pipelining:, unique: false)
      pool = Weft::Postgres::Pool.new(url, limit: CONNECTIONS, pipelining: pipelining)
      count, elapsed = select_one_loop(pool, seconds, unique: unique)
      count / elapsed
    ensure
      pool&.close
    end

    # Runs FIBERS fibers looping `select 1` through `pool`: a 1 s warm-up (connections opened,
    # caches hot), then `seconds` measured. A block given gets a callable that waits out the
    # measured part, to wrap it (pool_profile.rb takes counters and profiles around it).
    # @return [Array(Integer, Float)] statements completed while measuring, and the seconds
    def select_one_loop(pool, seconds, unique: false)
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
    def pgbench(seconds, pipelined:, mode: "extended")
      script = Tempfile.new(["select1", ".sql"])
      per_transaction = pipelined ? PIPELINE_BATCH : 1
      script.write(pipelined ? "\\startpipeline\n#{"select 1;\n" * PIPELINE_BATCH}\\endpipeline\n" : "select 1;\n")
      script.flush
      db = PostgresBench.database
      command = ["pgbench", "-n", "-M", mode, "-c", CONNECTIONS.to_s, "-j", "2", "-T", seconds.to_s,
                 "-f", script.path, db[:url]]
      out, status = Open3.capture2e(*command)
      raise "pgbench failed: #{out}" unless status.success?
      tps = out[/tps = ([\d.]+)/, 1].to_f
      tps * per_transaction
    ensure
      script&.close!
    end

    def report(seconds, unique: false)
      rows = run(seconds, unique: unique)
      pipelined, plain = rows[0].last, rows[1].last
      yardsticks = unique ? "" : <<~MARKDOWN
        Pipelined, of pgbench pipelined: #{format('%.1f%%', 100 * pipelined / rows[3].last)} of `-M extended`,
        #{format('%.1f%%', 100 * pipelined / rows[4].last)} of `-M prepared`.
      MARKDOWN
      <<~MARKDOWN
        ## `#{unique ? 'select <n>, every text new' : 'select 1'}`: #{FIBERS} fibers over #{CONNECTIONS} connections

        Command: `bundle exec ruby bench/postgres/pool_bench.rb #{seconds}#{' unique' if unique}` (each contender
        #{seconds} s after a 1 s warm-up; pgbench `-M extended -c #{CONNECTIONS} -j 2` and pipelined also
        `-M prepared`, pipelined script = #{PIPELINE_BATCH} statements per `\\startpipeline`/`\\endpipeline`).

        | contender | statements/s | vs Weft not pipelined |
        |---|---:|---:|
        #{rows.map { |label, value| "| #{label} | #{PostgresBench.format_number(value)} | #{format('%.2fx', value / plain)} |" }.join("\n")}

        ```
        #{PostgresBench.bars(rows, unit: " stmt/s")}
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
