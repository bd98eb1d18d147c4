# frozen_string_literal: true

# What a new `weft_postgresql` adapter object costs: ActiveRecord's pool makes one per fiber that
# queries at the same moment (up to `lease_limit:`), and each configures itself as it connects.
#
#   bundle exec ruby bench/postgres/adapter_connect.rb [adapters]
#
# Checks out `adapters` (default 200) adapters one after another from one ActiveRecord pool,
# connecting each (the first one opens the shared Weft pool's first connection), and prints,
# per adapter after the first: wall and CPU milliseconds, allocated objects, and the catalog
# queries (`SCHEMA`) it sent, from ActiveSupport's sql.active_record notifications. Runs under
# Weft's reactor, as an app under `weft serve` would. DATABASE_URL picks the server (a private
# throwaway cluster otherwise, see support.rb). To measure another checkout, copy this file into
# it and run it there (support.rb puts the checkout's own lib first on the load path).

require_relative "support"
require "weft"
require "active_record"
require "active_record/connection_adapters/weft_postgresql_adapter"

module PostgresBench
  # The adapter connect benchmark.
  module AdapterConnect
    module_function

    def run(adapters)
      ActiveSupport::IsolatedExecutionState.isolation_level = :fiber
      db = PostgresBench.database
      ActiveRecord::Base.establish_connection(url: db[:url].sub(/\Apostgres(ql)?:/, "weft-postgresql:"), pool: 4,
                                              lease_limit: adapters + 10)
      queries = Hash.new(0)
      counting = false
      ActiveSupport::Notifications.subscribe("sql.active_record") do |*, payload|
        queries[payload[:name] == "SCHEMA" ? :schema : :other] += 1 if counting
      end
      figures = Weft.run do
        pool = ActiveRecord::Base.connection_pool
        first = pool.checkout.tap(&:verify!) # the shared pool's first connection, and the first type map
        counting = true
        before = snapshot
        held = Array.new(adapters - 1) { pool.checkout.tap(&:verify!) }
        after = snapshot
        ([first] + held).each { |adapter| pool.checkin(adapter) }
        after.to_h { |key, value| [key, value - before[key]] }
      end
      report(adapters - 1, figures, queries)
    ensure
      ActiveRecord::Base.remove_connection
    end

    def snapshot
      times = Process.times
      { wall: PostgresBench.now, cpu: times.utime + times.stime, allocated: GC.stat(:total_allocated_objects) }
    end

    def report(count, figures, queries)
      <<~TEXT
        adapters connected: #{count} (after the first) in #{format('%.3f', figures[:wall])} s
        per adapter: wall #{format('%.2f', figures[:wall] * 1000 / count)} ms, CPU #{format('%.2f', figures[:cpu] * 1000 / count)} ms, objects #{(figures[:allocated].to_f / count).round}
        queries per adapter: SCHEMA #{format('%.2f', queries[:schema].to_f / count)}, other #{format('%.2f', queries[:other].to_f / count)}
      TEXT
    end
  end
end

puts PostgresBench::AdapterConnect.run(Integer(ARGV.fetch(0, 200))) if $PROGRAM_NAME == __FILE__
