# frozen_string_literal: true

# How Weft::Postgres::Pool meets a deadline: how late after `Weft.deadline(0.2)` passes the
# caller gets Weft::DeadlineExceeded for a `select pg_sleep(5)`, and how long after it the
# statement is gone from pg_stat_activity (the cancel request's round trip, done in the
# background). Once with the statement alone on a connection, once pipelined (one connection,
# other callers' statements behind it).
#
#   bundle exec ruby bench/postgres/deadline_bench.rb [iterations]   # default 20

require_relative "support"
require "weft/postgres"

module PostgresBench
  # The deadline measurements.
  module DeadlineBench
    DEADLINE = 0.2

    module_function

    def run(iterations)
      monitor = PG.connect(PostgresBench.database[:url])
      { "alone on a connection" => 4, "pipelined, 3 statements behind it" => 1 }.map do |label, size|
        pool = Weft::Postgres::Pool.new(PostgresBench.database[:url], limit: size)
        late, gone = measure(pool, monitor, iterations, pipelined: size == 1)
        [label, late, gone, pool.statistics[:discarded]]
      ensure
        pool&.close
      end
    ensure
      monitor&.close
    end

    # @return [Array(Array<Float>, Array<Float>)] per iteration: seconds from the deadline to
    #   the caller's error, and to the statement's end on the server
    def measure(pool, monitor, iterations, pipelined:)
      late = []
      gone = []
      Weft.run do
        pool.query("select 1")
        iterations.times do |i|
          tag = "deadline-bench-#{pipelined}-#{i}"
          blocker = Weft.spawn { pool.query("select pg_sleep(0.05)") } if pipelined
          sleep 0.01 if pipelined
          caller = Weft.spawn do
            started = PostgresBench.now
            begin
              Weft.deadline(DEADLINE) { pool.query("select pg_sleep(5), '#{tag}'") }
            rescue Weft::DeadlineExceeded
              nil
            end
            [started + DEADLINE, PostgresBench.now]
          end
          behind = pipelined ? Array.new(3) { Weft.spawn { pool.query("select 1") } } : []
          blocker&.wait
          deadline, raised = caller.wait
          late << raised - deadline
          sleep 0.001 while running?(monitor, tag)
          gone << PostgresBench.now - deadline
          Weft.gather(behind)
        end
      end
      [late, gone]
    end

    def running?(monitor, tag)
      monitor.exec_params(<<~SQL, [tag]).getvalue(0, 0).to_i.positive?
        select count(*) from pg_stat_activity
         where state = 'active' and pid <> pg_backend_pid() and position($1 in query) > 0
      SQL
    end

    def milliseconds(values)
      sorted = values.sort
      format("median %.1f ms, max %.1f ms", sorted[sorted.size / 2] * 1000, sorted.last * 1000)
    end

    def report(iterations)
      rows = run(iterations).map do |label, late, gone, discarded|
        "| #{label} | #{milliseconds(late)} | #{milliseconds(gone)} | #{discarded} |"
      end
      <<~MARKDOWN
        ## Deadlines: `Weft.deadline(#{DEADLINE}) { pool.query("select pg_sleep(5)") }`, #{iterations} times

        | statement | error after the deadline | gone from the server after the deadline | connections closed |
        |---|---|---|---|
        #{rows.join("\n")}
      MARKDOWN
    end
  end
end

if $PROGRAM_NAME == __FILE__
  puts "#{PostgresBench.machine}, load average #{File.read('/proc/loadavg').split.first(3).join(' ')}"
  puts PostgresBench::DeadlineBench.report(Integer(ARGV.fetch(0, 20)))
end
