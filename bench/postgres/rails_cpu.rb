# frozen_string_literal: true

# CPU per Rails request with the server left out (issue #13): the Rails app of
# bench/postgres/rails_bench.rb called through Rack in this one process, under Weft's reactor,
# by BENCH_C fibers (200) that each send their next request when the last one answered (the
# closed loop of rails_profile.rb without HTTP or a server), with ActiveRecord configurations
# taking turns round after round in the same process: same heap, same YJIT code, same
# database, so that what differs between two of them is the adapter and its pool alone.
#
#   bundle exec ruby bench/postgres/rails_cpu.rb [seconds] [rounds]
#
# After a warm-up of every configuration (unreported: YJIT compiles, connections open), each
# round runs every configuration for `seconds` (their order turns each round) and counts,
# over a window from SKIP_START seconds in to the end: CPU per request answered
# (CLOCK_PROCESS_CPUTIME_ID; PostgreSQL's CPU is its own processes'), objects allocated, GC
# runs and time, and, when YJIT runs with --yjit-stats, its counters per request.
#
# Environment: BENCH_CONFIGS (default "weft,postgresql"), BENCH_C (200), BENCH_DB_POOL (5).
# A configuration is
#   weft           adapter weft_postgresql, pool 5 (ActiveRecord's pool: lease_limit's default)
#   postgresql     adapter postgresql, pool 5: ActiveRecord's pool of 5 PG::Connections, as
#                  Falcon runs the app in rails_bench.rb
# either followed by database.yml settings as a query string: "weft?lease_limit=20" (at most 20
# adapter objects), "weft?pipelining=false".
# BENCH_SLEEP sets the request's `pg_sleep` in seconds (the app's 0.05 when unset; with 0 and
# BENCH_C=1 the tool measures one request at a time, CPU-bound). BENCH_YJIT_KEYS
# (comma-separated) adds YJIT counters to the per-round line (with --yjit-stats); BENCH_SHAPES=1
# prints, per round, how many adapter objects ActiveRecord's pool holds and how many distinct
# object shapes they and their RoutedConnections have (Ruby 3.2+: 3.1 has no shapes).

require_relative "rails_bench"
require "json"
require "objspace"
require "rack/mock"

module PostgresBench
  # The Rails app's request in-process, adapter against adapter.
  module RailsCpu
    SKIP_START = 2
    DATABASE = "weft_rails_cpu"

    module_function

    # @return [String] the database's URL with `scheme`
    def url(scheme)
      PostgresBench.database[:url].sub(%r{/[^/]*\z}, "/#{DATABASE}").sub(/\Apostgres(ql)?:/, "#{scheme}:")
    end

    # Creates, migrates and seeds the database with the app's Rails tasks (in a child: this
    # process boots the app itself afterwards).
    def prepare
      env = { "RAILS_ENV" => "production", "DATABASE_URL" => url("postgres"), "DB_POOL" => RailsBench::POOL.to_s,
              "SEED_AUTHORS" => RailsBench::AUTHORS.to_s }
      out, status = Open3.capture2e(env, RbConfig.ruby, Gem.bin_path("rake", "rake"), "db:drop", "db:create", "db:migrate",
                                    "db:seed", "DISABLE_DATABASE_ENVIRONMENT_CHECK=1", chdir: RailsBench::APP)
      raise "rails tasks failed:\n#{out}" unless status.success?
    end

    # Boots the app in this process on weft_postgresql (the configurations are set per round).
    def boot
      ENV.update("RAILS_ENV" => "production", "DATABASE_URL" => url("weft-postgresql"), "DB_POOL" => RailsBench::POOL.to_s,
                 "RAILS_ISOLATION_LEVEL" => "fiber")
      require File.join(RailsBench::APP, "config/environment")
      return unless ENV["BENCH_SLEEP"]

      PostsController.send(:remove_const, :SLOW_QUERY_SECONDS)
      PostsController.const_set(:SLOW_QUERY_SECONDS, Float(ENV["BENCH_SLEEP"]))
    end

    # @return [Hash] the ActiveRecord configuration named `name`: "weft" or "postgresql", then
    #   optionally "?" and settings of database.yml as a query string ("weft?lease_limit=20")
    def configuration(name)
      adapter, settings = name.split("?", 2)
      scheme = { "weft" => "weft-postgresql", "postgresql" => "postgres" }.fetch(adapter) do
        raise ArgumentError, "unknown configuration #{name} (weft or postgresql, then ?setting=value&...)"
      end
      { url: url(scheme), pool: RailsBench::POOL }.merge(URI.decode_www_form(settings.to_s).to_h { |key, value| [key.to_sym, value] })
    end

    # One POST /authors/:id/posts through Rack, as wrk's script sends it; its body read and closed
    # (Rails' executor gives the adapter back as the body closes).
    def request(app, title)
      env = Rack::MockRequest.env_for("/authors/#{rand(1..RailsBench::AUTHORS)}/posts", method: "POST",
                                                                                      input: "title=#{title}",
                                                                                      "CONTENT_TYPE" => "application/x-www-form-urlencoded")
      status, _headers, body = app.call(env)
      body.each { |_chunk| nil }
      body.close if body.respond_to?(:close)
      raise "POST answered #{status}" unless status == 201
    end

    # The process's counters now (a window is the difference of two).
    # @return [Hash]
    def counters(requests)
      gc = GC.stat
      yjit = defined?(RubyVM::YJIT) && RubyVM::YJIT.enabled? && RubyVM::YJIT.stats_enabled?
      { cpu: Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID), system: Process.times.stime, requests: requests,
        allocated: gc[:total_allocated_objects], minor: gc[:minor_gc_count], major: gc[:major_gc_count], gc_ms: gc[:time] || 0,
        yjit: (RubyVM::YJIT.runtime_stats if yjit) }
    end

    # Runs `name`'s configuration for `seconds` with `fibers` request loops.
    # @return [Hash] the window's figures per request
    def measure(name, seconds, fibers, round)
      ActiveRecord::Base.establish_connection(configuration(name))
      app = Rails.application
      requests = 0
      stop = false
      before = after = nil
      Weft.run do
        loops = Array.new(fibers) do |index|
          Weft.spawn do
            count = 0
            until stop
              request(app, "cpu-#{round}-#{name}-#{index}-#{count += 1}-#{rand(1 << 40)}")
              requests += 1
            end
          end
        end
        sleep SKIP_START
        before = counters(requests)
        sleep seconds - SKIP_START
        after = counters(requests)
        after[:seconds] = seconds - SKIP_START
        after[:shapes] = shapes if ENV["BENCH_SHAPES"]
        stop = true
        Weft.gather(*loops)
      end
      window(before, after)
    end

    # The adapters ActiveRecord's pool holds, and the distinct shapes (ObjectSpace.dump's
    # shape_id) of them and of their RoutedConnections: objects of one class in many shapes
    # make YJIT's instance-variable reads on them polymorphic.
    def shapes
      adapters = ActiveRecord::Base.connection_pool.connections
      shape = ->(object) { JSON.parse(ObjectSpace.dump(object))["shape_id"] }
      raw = adapters.map { |adapter| adapter.instance_variable_get(:@raw_connection) }.compact
      { adapters: adapters.size, adapter_shapes: adapters.map(&shape).tally.size,
        raw_classes: raw.map(&:class).tally.transform_keys(&:name), raw_shapes: raw.map(&shape).tally.size }
    end

    # The window's figures per request answered (and YJIT's counters, when it counts).
    # @return [Hash]
    def window(before, after)
      requests = after[:requests] - before[:requests]
      result = { requests: requests, rate: requests.fdiv(after[:seconds]), cpu_us: (after[:cpu] - before[:cpu]) * 1e6 / requests,
                 system_us: (after[:system] - before[:system]) * 1e6 / requests,
                 objects: (after[:allocated] - before[:allocated]).fdiv(requests),
                 minor_per_1k: (after[:minor] - before[:minor]) * 1000.0 / requests,
                 major_per_1k: (after[:major] - before[:major]) * 1000.0 / requests,
                 gc_us: (after[:gc_ms] - before[:gc_ms]) * 1000.0 / requests, shapes: after[:shapes] }
      if after[:yjit]
        keys = %i[yjit_insns_count vm_insns_count side_exit_count] + ENV.fetch("BENCH_YJIT_KEYS", "").split(",").map(&:to_sym)
        result[:yjit] = keys.to_h { |key| [key, ((after[:yjit][key] || 0) - (before[:yjit][key] || 0)).fdiv(requests).round(2)] }
      end
      result
    end

    # Runs the rounds and prints each configuration's figures per round, then its CPU per
    # request over the rounds.
    def run(seconds, rounds)
      $stdout.sync = true # each round as it ends
      prepare
      boot
      names = HttpBench.list("BENCH_CONFIGS", "weft,postgresql")
      fibers = Integer(ENV.fetch("BENCH_C", "200"))
      results = Hash.new { |hash, key| hash[key] = [] }
      puts "#{RUBY_DESCRIPTION}; Rails #{Rails.version}; #{fibers} fibers; pg_sleep(#{PostsController::SLOW_QUERY_SECONDS}); " \
           "#{seconds} s per configuration, window from #{SKIP_START} s"
      # Unreported: each configuration's first run compiles (YJIT) and connects.
      names.each { |name| measure(name, SKIP_START + 3, fibers, -1) }
      rounds.times do |round|
        (round.even? ? names : names.reverse).each do |name|
          load_before = File.read("/proc/loadavg").split.first
          w = measure(name, seconds, fibers, round)
          results[name] << w[:cpu_us]
          puts format("round %d %-14s load %s  %5d requests (%.1f/s), %6.0f µs CPU (system %4.0f), %5.0f objects, " \
                      "%.1f minor + %.1f major GC per 1k, %4.0f µs GC%s%s",
                      round + 1, name, load_before, w[:requests], w[:rate], w[:cpu_us], w[:system_us], w[:objects], w[:minor_per_1k],
                      w[:major_per_1k], w[:gc_us],
                      w[:yjit] ? "  YJIT #{w[:yjit].inspect}" : "", w[:shapes] ? "  #{w[:shapes].inspect}" : "")
        end
      end
      results.each do |name, values|
        mean = values.sum / values.size
        puts format("%-14s µs CPU per request: mean %.0f, min %.0f, max %.0f (%s)", name, mean, values.min, values.max,
                    values.map(&:round).join(" "))
      end
    end
  end
end

PostgresBench::RailsCpu.run(Integer(ARGV.fetch(0, 10)), Integer(ARGV.fetch(1, 3))) if $PROGRAM_NAME == __FILE__
