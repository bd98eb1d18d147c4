# frozen_string_literal: true

# Latency of `select 1` through Weft::Postgres::Pool on a reactor busy with CPU-bound fibers:
# what holding a segment back for a turn (Pipeline#hold_back) must not cost.
#
#   bundle exec ruby bench/postgres/busy_latency.rb [seconds]   # default 4, after a 1 s warm-up
#
# FIBERS (20) fibers loop `select 1` over LIMIT (4) connections while SPINNERS (2) fibers each
# burn the CPU in slices of SPIN_MIN-SPIN_MAX ms (uniform, default 1-5) and yield (`sleep 0`),
# or with PAUSE_MS > 0 sleep that long between slices (a reactor busy now and then). SPINNERS=0:
# a quiet reactor. WRITE_DELAY=1 runs `select extract(epoch from clock_timestamp())` instead
# and also reports how long after the caller sent it each statement ran on the server (one
# clock). Prints statements/s, latency percentiles (ms) and the pool's counters. DATABASE_URL
# picks the server (a private throwaway cluster otherwise, see support.rb).

require_relative "support"
require "weft"
require "weft/postgres"

module PostgresBench
  # The busy-reactor latency run.
  module BusyLatency
    module_function

    # @return [Hash] the run's settings, from the environment
    def settings
      {
        fibers: Integer(ENV.fetch("FIBERS", 20)), limit: Integer(ENV.fetch("LIMIT", 4)),
        spinners: Integer(ENV.fetch("SPINNERS", 2)), spin_min: Float(ENV.fetch("SPIN_MIN", 1)) / 1000,
        spin_max: Float(ENV.fetch("SPIN_MAX", 5)) / 1000, pause: Float(ENV.fetch("PAUSE_MS", 0)) / 1000,
        write_delay: ENV["WRITE_DELAY"] == "1"
      }
    end

    # Runs the statement loops beside the spinners for `seconds` after a 1 s warm-up.
    # @return [Hash] :latencies and :delays (seconds), :count, :elapsed, :spun, :statistics
    def run(seconds, fibers:, limit:, spinners:, spin_min:, spin_max:, pause:, write_delay:)
      sql = write_delay ? "select extract(epoch from clock_timestamp())::float8" : "select 1"
      figures = { latencies: [], delays: [], count: 0, spun: 0.0 }
      pool = Weft::Postgres::Pool.new(PostgresBench.database[:url], limit: limit)
      Weft.run do
        stop = false
        measuring = false
        random = Random.new(42)
        busy = Array.new(spinners) do
          Weft.spawn do
            until stop
              slice = spin_min + (random.rand * (spin_max - spin_min))
              started = PostgresBench.now
              nil while PostgresBench.now - started < slice
              figures[:spun] += PostgresBench.now - started if measuring
              pause.positive? ? sleep(pause) : sleep(0)
            end
          end
        end
        workers = Array.new(fibers) do
          Weft.spawn do
            until stop
              sent = Time.now.to_f if write_delay
              started = PostgresBench.now
              result = pool.query(sql)
              next unless measuring

              figures[:latencies] << PostgresBench.now - started
              figures[:delays] << result.getvalue(0, 0).to_f - sent if write_delay
              figures[:count] += 1
            end
          end
        end
        sleep 1
        measuring = true
        started = PostgresBench.now
        sleep seconds
        measuring = false
        figures[:elapsed] = PostgresBench.now - started
        stop = true
        Weft.gather(workers + busy)
      end
      figures.merge(statistics: pool.statistics)
    ensure
      pool&.close
    end

    # The `share` quantile of `values` (seconds), in milliseconds.
    def percentile(values, share)
      sorted = values.sort
      sorted[[(sorted.size * share).ceil - 1, 0].max] * 1000
    end

    def report(seconds)
      options = settings
      figures = run(seconds, **options)
      latencies = figures[:latencies]
      lines = []
      lines << format("%d fibers, %d connections, %d spinners (%.0f-%.0f ms%s): %d statements/s; spinners %.0f%% of the wall",
                      options[:fibers], options[:limit], options[:spinners], options[:spin_min] * 1000, options[:spin_max] * 1000,
                      options[:pause].positive? ? ", #{options[:pause] * 1000} ms pauses" : "",
                      figures[:count] / figures[:elapsed], 100 * figures[:spun] / figures[:elapsed])
      lines << format("latency ms: p50 %.2f, p90 %.2f, p99 %.2f, p99.9 %.2f, max %.2f; over 20 ms: %d",
                      *[0.5, 0.9, 0.99, 0.999, 1.0].map { |share| percentile(latencies, share) },
                      latencies.count { |latency| latency > 0.02 })
      if options[:write_delay]
        lines << format("sent-to-run ms: p10 %.2f, p50 %.2f, p90 %.2f, p99 %.2f, max %.2f",
                        *[0.1, 0.5, 0.9, 0.99, 1.0].map { |share| percentile(figures[:delays], share) })
      end
      lines << "pool: #{figures[:statistics].slice(:queries, :pipelined, :slow_marked, :max_depth).map { |k, v| "#{k}=#{v}" }.join(' ')}"
      lines.join("\n")
    end
  end
end

puts PostgresBench::BusyLatency.report(Float(ARGV.fetch(0, 4))) if $PROGRAM_NAME == __FILE__
