# frozen_string_literal: true

# What a Weft task that ends holding an ActiveRecord connection costs, against one that gave it
# back itself (Weft::Postgres::ActiveRecordTaskEnd resets the connection a task left leased and
# checks it in as the task ends).
#
#   bundle exec ruby bench/postgres/task_end_bench.rb [tasks]
#
# For `adapter: postgresql` and `adapter: weft_postgresql` (one PostgreSQL connection each, so
# that every task uses the same one), runs `tasks` (default 500) tasks one after another, each
# sending `select 1`: either through `connection_pool.with_connection` (given back), or leased
# with the fiber (`lease_connection`; Rails 7.1: `connection`) and left so. Prints per task:
# wall and CPU milliseconds, and the calls made on PG::Connection (each a round trip; for
# weft_postgresql those of its shared pool do not go through them and are not counted), by
# the first words of their SQL. DATABASE_URL picks the server (a private throwaway cluster
# otherwise, see support.rb).

require_relative "support"
require "weft"
require "active_record"
require "active_record/connection_adapters/weft_postgresql_adapter"

module PostgresBench
  # The task-end benchmark.
  module TaskEnd
    # Counts PG::Connection's statement calls by the first words of their SQL, while on.
    module CallCount
      class << self
        attr_accessor :on

        # @return [Hash{String => Integer}]
        def calls
          @calls ||= Hash.new(0)
        end
      end

      %i[exec async_exec query async_query exec_params async_exec_params].each do |name|
        define_method(name) do |sql, *args, **options, &block|
          CallCount.calls[sql.to_s.strip[/\A\S+(\s+\S+)?/].to_s[0, 30]] += 1 if CallCount.on
          super(sql, *args, **options, &block)
        end
      end
    end

    module_function

    def run(tasks)
      ActiveSupport::IsolatedExecutionState.isolation_level = :fiber
      Weft::Postgres::ActiveRecordTaskEnd.install
      PG::Connection.prepend(CallCount)
      url = PostgresBench.database[:url]
      lines = ["#{PostgresBench.machine}, ActiveRecord #{ActiveRecord.version}, #{tasks} tasks each"]
      { "postgresql" => url.sub(/\Apostgres(ql)?:/, "postgres:"),
        "weft_postgresql" => url.sub(/\Apostgres(ql)?:/, "weft-postgresql:") }.each do |adapter, adapter_url|
        ActiveRecord::Base.establish_connection(url: adapter_url, pool: 1, checkout_timeout: 5)
        %i[given_back left_leased].each do |mode|
          figures = measure(tasks, mode)
          lines << format("%-16s %-12s wall %.3f ms, CPU %.3f ms per task; calls per task: %s", adapter, mode,
                          figures[:wall] * 1000 / tasks, figures[:cpu] * 1000 / tasks,
                          figures[:calls].sort_by { |_, count| -count }
                                         .map { |sql, count| format("%s %.1f", sql, count.to_f / tasks) }.join(", "))
        end
        ActiveRecord::Base.remove_connection
      end
      lines.join("\n")
    end

    # Runs the tasks one after another, after a warm-up round.
    def measure(tasks, mode)
      Weft.run do
        Array.new(20) { Weft.spawn { query(mode) }.wait }
        CallCount.calls.clear
        CallCount.on = true
        before = snapshot
        tasks.times { Weft.spawn { query(mode) }.wait }
        after = snapshot
        CallCount.on = false
        after.to_h { |key, value| [key, value - before[key]] }.merge(calls: CallCount.calls.dup)
      end
    end

    def query(mode)
      pool = ActiveRecord::Base.connection_pool
      if mode == :given_back
        pool.with_connection { |conn| conn.select_value("select 1") }
      else
        (pool.respond_to?(:lease_connection) ? pool.lease_connection : pool.connection).select_value("select 1")
      end
    end

    def snapshot
      times = Process.times
      { wall: PostgresBench.now, cpu: times.utime + times.stime }
    end
  end
end

puts PostgresBench::TaskEnd.run(Integer(ARGV.fetch(0, 500))) if $PROGRAM_NAME == __FILE__
