# frozen_string_literal: true

# Sequel under Weft with 200 fibers: the weft_postgres adapter (limit 5, statements pipelined)
# against the stock postgres adapter with fiber_concurrency (each fiber checks out a whole
# connection per statement) at max_connections 5 and 200. Two workloads: each fiber runs five
# short statements and a pg_sleep(0.05) (the sleeps alone need 2.0 s on five connections), or
# 50 short statements. Prints seconds per run and the most backends the pool opened.
#
#   flock /work/wt/bench.lock bundle exec ruby bench/postgres/sequel_bench.rb [runs]   # default 3

require_relative "support"
require "weft"
require "sequel"

Sequel.extension :fiber_concurrency # for the stock adapter; the weft_postgres one needs none

module PostgresBench
  # The Sequel comparison.
  module SequelBench
    FIBERS = 200
    WORKLOADS = {
      "5 statements + pg_sleep(0.05)" => lambda do |db, i|
        5.times { |n| db[:bench_items].where(id: ((i + n) % 200) + 1).get(:v) }
        db.get(Sequel.function(:pg_sleep, 0.05))
      end,
      "50 statements" => ->(db, i) { 50.times { |n| db[:bench_items].where(id: ((i + n) % 200) + 1).get(:v) } },
    }.freeze
    SETUPS = {
      "weft_postgres, limit 5" => { adapter: :weft_postgres, limit: 5 },
      "postgres, max_connections 5" => { adapter: :postgres, max_connections: 5, pool_timeout: 60 },
      "postgres, max_connections 200" => { adapter: :postgres, max_connections: 200 },
    }.freeze

    module_function

    def run(runs)
      url = PostgresBench.database[:url]
      puts PostgresBench.machine
      SETUPS.each do |label, options|
        db = Sequel.connect(url.sub(/\Apostgres(ql)?:/, "#{options[:adapter].to_s.tr('_', '-')}:"), **options, keep_reference: false)
        db.create_table!(:bench_items) { primary_key :id; Integer :v } # rubocop:disable Style/Semicolon
        db[:bench_items].import([:v], (1..200).map { |v| [v] })
        WORKLOADS.each do |workload, body|
          times = Array.new(runs) { time(db, body) }
          puts format("%-32s %-30s %s s, %d connections", label, workload, times.map { |t| format("%.2f", t) }.join(" / "),
                      db.pool.size)
        end
        db.disconnect
      end
    end

    def time(db, body)
      started = PostgresBench.now
      Weft.run { Array.new(FIBERS) { |i| Weft.spawn { body.call(db, i) } }.each(&:wait) }
      PostgresBench.now - started
    end
  end
end

PostgresBench::SequelBench.run(Integer(ARGV.fetch(0, 3))) if $PROGRAM_NAME == __FILE__
