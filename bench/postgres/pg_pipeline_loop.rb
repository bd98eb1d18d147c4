# frozen_string_literal: true

# `pg` alone, no Weft: one connection in pipeline mode sends `select 1` in batches and reads the
# answers, with a sync point after every statement or one per batch. Shows what the sync points
# cost libpq, `pg` and the kernel, apart from any pool.
#
#   bundle exec ruby bench/postgres/pg_pipeline_loop.rb [statements] [batch]
#
# Prints statements/s, and this process's CPU microseconds and allocated objects per statement,
# for both ways. DATABASE_URL picks the server (a private throwaway cluster otherwise).

require_relative "support"
require "io/wait"

module PostgresBench
  # The bare pipeline loop.
  module PgPipelineLoop
    module_function

    def run(url, statements, batch, sync_each:)
      conn = PG.connect(url)
      conn.setnonblocking(true)
      conn.enter_pipeline_mode
      started = PostgresBench.now
      cpu = Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID)
      allocated = GC.stat(:total_allocated_objects)
      (statements / batch).times { round_trip(conn, batch, sync_each) }
      elapsed = PostgresBench.now - started
      cpu = Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID) - cpu
      allocated = GC.stat(:total_allocated_objects) - allocated
      format("%-26s %9s stmt/s, %5.2f µs CPU and %.1f objects per statement",
             sync_each ? "a sync per statement:" : "one sync per #{batch}:",
             PostgresBench.format_number(statements / elapsed), cpu * 1e6 / statements, allocated.to_f / statements)
    ensure
      conn&.close
    end

    # Sends a batch, then reads until every sync point of it has come back.
    def round_trip(conn, batch, sync_each)
      batch.times do
        conn.send_query_params("select 1", [])
        conn.send_pipeline_sync if sync_each
      end
      conn.send_pipeline_sync unless sync_each
      conn.flush
      syncs = sync_each ? batch : 1
      until syncs.zero?
        conn.socket_io.wait_readable
        conn.consume_input
        until syncs.zero? || conn.is_busy
          result = conn.sync_get_result
          syncs -= 1 if result&.result_status == PG::PGRES_PIPELINE_SYNC
        end
      end
    end
  end
end

if $PROGRAM_NAME == __FILE__
  statements = Integer(ARGV.fetch(0, 200_000))
  batch = Integer(ARGV.fetch(1, 25))
  url = PostgresBench.database[:url]
  puts PostgresBench::PgPipelineLoop.run(url, statements, batch, sync_each: true)
  puts PostgresBench::PgPipelineLoop.run(url, statements, batch, sync_each: false)
end
