# frozen_string_literal: true

# What sending one named statement without parameters costs this process: `pg`'s
# send_query_prepared(name, []) against Weft::Postgres::NativeSender.send_prepared (one C call
# to libpq's PQsendQueryPrepared), on one pipelined connection, each send made from one of
# `fibers` fibers in turn, as a pool's callers make them from their own stacks (`pg` zero-fills
# a 4 KB parameter buffer on the caller's stack, which is cold in a fiber that last ran a
# round trip ago). Rounds of 25 sends alternate between the two, so that both meet the same
# load; the answers are read outside the timed part.
#
#   bundle exec ruby bench/postgres/pg_send_cost.rb [rounds] [fibers]   # default 4000 100
#
# Prints the thread CPU nanoseconds per send of each, the fiber switch to the sending fiber
# included (the same for both). DATABASE_URL picks the server (a private throwaway cluster
# otherwise, see support.rb).

require_relative "support"
require "weft/postgres"

module PostgresBench
  # The send-cost comparison.
  module PgSendCost
    ROUND = 25 # sends between two sync points

    module_function

    def run(url, rounds, fibers)
      raise "NativeSender is not bound (ext/weft_pg not built?)" unless Weft::Postgres::ResultReader::SENDER

      conn = PG.connect(url)
      conn.prepare("weft_send_cost", "select 1")
      conn.setnonblocking(true)
      conn.enter_pipeline_mode
      sender = nil
      senders = {
        pg: -> { conn.send_query_prepared("weft_send_cost", []) },
        native: -> { Weft::Postgres::NativeSender.send_prepared(conn, "weft_send_cost") || raise("libpq refused") },
      }
      workers = Array.new(fibers) { Fiber.new { loop { sender.call; Fiber.yield } } }
      cpu = Hash.new(0.0)
      sends = 0
      rounds.times do |round|
        # pg, native, native, pg, pg, native...: neither always goes first
        name = (round + round / 2).even? ? :pg : :native
        sender = senders[name]
        started = Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID)
        ROUND.times { workers[(sends += 1) % fibers].resume }
        cpu[name] += Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID) - started
        read_round(conn)
      end
      cpu.map { |key, seconds| format("%-7s %5.0f ns per send\n", key, seconds * 1e9 / (rounds / 2 * ROUND)) }.join
    ensure
      conn&.close
    end

    # Ends the round with a sync point and reads until it comes back.
    def read_round(conn)
      conn.pipeline_sync
      loop do
        if conn.is_busy
          conn.socket_io.wait_readable
          conn.consume_input
          next
        end
        result = conn.get_result or next
        synced = result.result_status == PG::PGRES_PIPELINE_SYNC
        result.clear
        break if synced
      end
    end
  end
end

if $PROGRAM_NAME == __FILE__
  rounds = Integer(ARGV.fetch(0, 4000))
  fibers = Integer(ARGV.fetch(1, 100))
  puts "#{RUBY_DESCRIPTION}; #{fibers} fibers, #{rounds} rounds of #{PostgresBench::PgSendCost::ROUND}"
  puts PostgresBench::PgSendCost.run(PostgresBench.database[:url], rounds, fibers)
end
