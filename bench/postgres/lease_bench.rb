# frozen_string_literal: true

# Transactions on held connections, nothing pipelined (issue #12's named statements on leases):
# FIBERS fibers each running transactions back to back over a pool of 4 connections, for
# `seconds`, after a second of warm-up; prints transactions per second, the CPU each
# transaction took in this process and in the server's backends (from /proc; on the private
# cluster only), and the named statements the pool keeps. Three kinds of transaction:
#
# - transaction: Pool#transaction with 3 INSERTs and 1 SELECT, each Pool#query with parameters
#   (on the pinned connection);
# - lease: the same on a Lease as ActiveRecord's adapter sends it (BEGIN and COMMIT through
#   Lease#async_exec, the statements through Lease#exec_params);
# - activerecord: `adapter: weft_postgresql` (Rails 7.2 on 3.1, 8.1 on 3.3), Model.transaction
#   with a create! and an update! (INSERT ... RETURNING "id" and UPDATE, with binds).
#
#   flock /work/wt/bench.lock bundle exec ruby bench/postgres/lease_bench.rb [kind] [seconds] [prepared]
#
# `prepared` (default 256) is the pool's prepared_statements: option (0: every statement
# unnamed). To compare with another version of the code, run this file from a copy of the tree
# at that version (support.rb puts the tree's own lib/ first).

require_relative "support"
require "weft"
require "weft/postgres"

module PostgresBench
  # Transactions of a few statements each on a pool's held connections.
  module LeaseBench
    FIBERS = 64
    CONNECTIONS = 4
    INSERT = "insert into lease_bench (fiber, n, tag) values ($1, $2, $3)"
    TOTAL = "select count(*), sum(n) from lease_bench where fiber = $1 and n >= $2"

    module_function

    def run(kind, seconds, prepared)
      url = PostgresBench.database[:url]
      setup = PG.connect(url)
      setup.exec("set client_min_messages to warning")
      setup.exec("drop table if exists lease_bench; create table lease_bench (fiber int, n int, tag text)")
      setup.exec("create index on lease_bench (fiber, n)")
      setup.close
      transaction = kind == "activerecord" ? activerecord(url, prepared) : pool_transaction(kind, url, prepared)
      count, elapsed, client, server = measure(seconds, &transaction)
      statistics = @pool.statistics
      printf("%-12s prepared=%-3d %8.0f transactions/s  CPU/transaction: client %5.0f µs, server %5.0f µs  " \
             "(%d in %.1f s; %d named statements kept, %s)\n",
             kind, prepared, count / elapsed, client / count * 1e6, server / count * 1e6, count, elapsed,
             statistics[:prepared], RUBY_DESCRIPTION[/\A\S+ \S+/])
    end

    # Seconds of CPU the private cluster's processes (the postmaster's children: backends and
    # workers) have used so far; 0.0 against DATABASE_URL.
    def server_cpu
      cluster = PostgresBench.database[:cluster] or return 0.0
      postmaster = File.read(File.join(cluster.data_dir, "postmaster.pid")).to_i
      ticks = Dir["/proc/[0-9]*/stat"].sum do |path|
        fields = File.read(path).split(") ").last.split
        fields[1].to_i == postmaster ? fields[11].to_i + fields[12].to_i : 0 # ppid; utime, stime
      rescue Errno::ENOENT, Errno::ESRCH
        0
      end
      ticks / Etc.sysconf(Etc::SC_CLK_TCK).to_f
    end

    def process_cpu
      Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID)
    end

    # FIBERS fibers running the block (given the fiber's number and its round) until `seconds`
    # after a second of warm-up; returns transactions counted, the seconds they took, and the
    # CPU seconds this process and the server used meanwhile.
    def measure(seconds)
      counted = 0
      cpu_at_start = nil
      warm_until = PostgresBench.now + 1.0
      stop_at = warm_until + seconds
      Weft.run do
        Weft.spawn do
          sleep(warm_until - PostgresBench.now)
          cpu_at_start = [process_cpu, server_cpu]
        end
        Weft.gather(Array.new(FIBERS) do |fiber|
          Weft.spawn do
            round = 0
            while PostgresBench.now < stop_at
              yield fiber, round
              round += 1
              counted += 1 if PostgresBench.now >= warm_until
            end
          end
        end)
      end
      elapsed = PostgresBench.now - warm_until
      [counted, elapsed, process_cpu - cpu_at_start[0], server_cpu - cpu_at_start[1]]
    end

    def pool_transaction(kind, url, prepared)
      @pool = Weft::Postgres::Pool.new(url, limit: CONNECTIONS, prepared_statements: prepared, acquire_timeout: 60)
      pool = @pool
      if kind == "lease"
        lambda do |fiber, round|
          lease = pool.lease
          begin
            lease.async_exec("BEGIN")
            3.times { |i| lease.exec_params(INSERT, [fiber, round, "r#{i}"]) }
            lease.exec_params(TOTAL, [fiber, round])
            lease.async_exec("COMMIT")
          ensure
            lease.release
          end
        end
      else
        lambda do |fiber, round|
          pool.transaction do
            3.times { |i| pool.query(INSERT, fiber, round, "r#{i}") }
            pool.query(TOTAL, fiber, round)
          end
        end
      end
    end

    def activerecord(url, prepared)
      require "active_record/connection_adapters/weft_postgresql_adapter"
      ActiveSupport::IsolatedExecutionState.isolation_level = :fiber
      ActiveRecord::Base.logger = nil
      info = PG::Connection.conninfo_parse(url).to_h { |o| [o[:keyword].to_sym, o[:val]] }
      ActiveRecord::Base.establish_connection(
        adapter: "weft_postgresql", host: info[:host], port: info[:port], username: info[:user] || "postgres",
        database: info[:dbname] || "postgres", pool: CONNECTIONS, checkout_timeout: 60,
        prepared_statements: prepared.positive?, statement_limit: [prepared, 1].max
      )
      row = Class.new(ActiveRecord::Base) { self.table_name = "lease_bench" }
      ActiveRecord::Base.connection_pool.with_connection do |conn|
        conn.add_column(:lease_bench, :id, :primary_key)
        row.reset_column_information
        @pool = conn.instance_variable_get(:@raw_connection).instance_variable_get(:@database).pool
      end
      lambda do |fiber, round|
        ActiveRecord::Base.connection_pool.with_connection do
          row.transaction do
            created = row.create!(fiber: fiber, n: round, tag: "r0")
            created.update!(tag: "r1")
          end
        end
      end
    end
  end
end

kind = ARGV[0] || "transaction"
abort "kind: transaction, lease or activerecord" unless %w[transaction lease activerecord].include?(kind)
PostgresBench::LeaseBench.run(kind, Float(ARGV[1] || 5), Integer(ARGV[2] || 256))
