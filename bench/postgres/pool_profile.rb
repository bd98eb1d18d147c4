# frozen_string_literal: true

# Where the time of a pipelined statement goes: the Weft half of pool_bench.rb (`select 1` from
# 100 fibers over 4 connections, pipelined) alone, with per-statement figures.
#
#   bundle exec ruby bench/postgres/pool_profile.rb [seconds]          # statements/s, CPU, allocations
#   strace -c -f -o trace.txt bundle exec ruby bench/postgres/pool_profile.rb 5 # + syscalls
#   perf record -g bundle exec ruby bench/postgres/pool_profile.rb 5            # + C-level profile
#   WEFT_STACKPROF=out.dump bundle exec ruby bench/postgres/pool_profile.rb 5   # + Ruby-level profile
#     (WEFT_STACKPROF_INTERVAL=50: sample every 50 µs of CPU rather than 200)
#   WEFT_CALLS=1 bundle exec ruby bench/postgres/pool_profile.rb 1              # + method calls per statement
#   WEFT_COUNT=1 bundle exec ruby bench/postgres/pool_profile.rb 5               # + events per statement
#   WEFT_CALLGRIND=1 valgrind --tool=callgrind --collect-atstart=no --smc-check=all-non-file \
#     ruby -rbundler/setup bench/postgres/pool_profile.rb 20        # + instructions per statement
#     (with WEFT_WARMUP=60: the warm-up's seconds, 1 unless set; valgrind needs ~60 to get going;
#     Debian's valgrind package, not installed by bin/setup: this mode only)
#   WEFT_BUSY=2 bundle exec ruby bench/postgres/pool_profile.rb 5                # on a busy reactor
#   WEFT_ALLOCATIONS=1 bundle exec ruby bench/postgres/pool_profile.rb 2         # + objects by site
#   WEFT_UNIQUE=1 bundle exec ruby bench/postgres/pool_profile.rb 5              # every text new
#   WEFT_PIPELINING=0 bundle exec ruby bench/postgres/pool_profile.rb 5          # the unpipelined pool
#   LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2 bundle exec ruby bench/postgres/pool_profile.rb 5
#                                                     # another malloc (docs/postgres.md, "Deployment")
#
# Prints statements/s, CPU microseconds of this process per statement (user and system: the
# pool, pg, libpq, the reactor, the kernel's socket work; PostgreSQL's own work is in other
# processes), objects allocated per statement, GC runs, and the pool's pipelining counters.
# With WEFT_STACKPROF set it samples the measured seconds with stackprof (in the bench group of
# the Gemfile) and writes the dump there.
# With WEFT_COUNT set it counts, per statement, fiber switches and calls of the reactor's and
# pg's methods that a statement's trip goes through (TracePoints slow the run down; the counts
# are what matters). DATABASE_URL picks the server (a private throwaway cluster otherwise, see support.rb).
# With WEFT_CALLS set it counts every method call per statement (Ruby methods, C functions and
# blocks, by TracePoint, which makes the run far slower: the counts are what matters), and how
# many of them are the operators and Array/Hash accessors the VM runs without a call unless
# traced (Integer#+, Array#size, Hash#[]...): the rest is what a statement's trip costs in calls,
# a figure that the machine's load does not move. The stall check is switched off for the run
# (Pool::STALL_AFTER raised: a traced round takes longer than 2 ms).
# With WEFT_CALLGRIND set (under valgrind's callgrind, started as above: valgrind does not follow
# `bundle exec`'s exec) callgrind collects over the measured seconds only, and the instructions
# this process ran per statement are the file's `totals` divided by the statements printed
# (callgrind_annotate lists them by function). Unlike CPU time, that count does not move with
# the machine's load (±1% from run to run on a machine at load 4-8, where user+system moved
# ±15%), so it can tell a change of a few percent; it leaves out the kernel's work and what
# cache misses cost, and valgrind runs the process ~50x slower, so every statement's head has
# been in flight past Pool::STALL_AFTER (Pool#least_loaded_stalled, taken by 4-6% of
# statements in a normal run, runs for nearly all) and segments are full.
# With WEFT_ALLOCATIONS set it lists the objects allocated per statement by class and site
# (ObjectSpace's allocation tracing, with the GC off while measuring: keep the run short; an
# object made in C is charged to the Ruby line that called into C).
# With WEFT_BUSY=N, N more fibers keep the reactor busy while measuring, as request handlers doing
# CPU work would: each spins for WEFT_SPIN_MS (default 5) ms between yields, so that every turn of
# the reactor, and every answer's reading, is late. Their own CPU is taken out of the per-statement
# figure. Either way it counts how often the pool found a statement running long (and so kept it
# apart, see docs/postgres.md, "Routing"), with a wrapper of its own around
# Weft::Postgres::SlowStatements, so that it counts the same on checkouts without the pool's
# slow_marked counter (copy this file into the other checkout to run it there).

require_relative "support"
require_relative "pool_bench"

module PostgresBench
  # The profiled run.
  module PoolProfile
    # Methods whose calls WEFT_COUNT counts: [owner, name].
    COUNTED = [
      %w[Weft::Scheduler io_wait], %w[Weft::Scheduler wake],
      %w[PG::Connection flush], %w[PG::Connection sync_flush], %w[PG::Connection consume_input],
      %w[PG::Connection is_busy], %w[PG::Connection sync_get_result],
      %w[Weft::Postgres::Pipeline sync], %w[Weft::Postgres::Pipeline lead],
    ].freeze

    module_function

    def run(seconds)
      @toggle = callgrind_toggle
      # (under valgrind a caller can wait past the default acquire_timeout for its slot)
      pool = Weft::Postgres::Pool.new(PostgresBench.database[:url], limit: PoolBench::CONNECTIONS,
                                                                    pipelining: ENV["WEFT_PIPELINING"] != "0",
                                                                    acquire_timeout: @toggle ? 600.0 : 5.0)
      figures = nil
      counts = nil
      warm_up = Float(ENV.fetch("WEFT_WARMUP", 1))
      unique = ENV["WEFT_UNIQUE"] == "1"
      count, = PoolBench.select_one_loop(pool, seconds, unique: unique, warm_up: warm_up) do |measured|
        busy = Busy.new(Integer(ENV.fetch("WEFT_BUSY", 0)), Float(ENV.fetch("WEFT_SPIN_MS", 5)) / 1000)
        before = snapshot
        counts = counted { profiled { traced { calls_counted { instructions_counted { measured.call } } } } }
        busy.stop
        figures = delta(before, snapshot)
        figures[:spun] = busy.cpu
      end
      report(count, figures, pool.statistics) +
        counts.map { |name, n| format("%-30s %.2f per statement\n", name, n.to_f / count) }.join +
        allocation_sites(count) + call_counts(count)
    ensure
      pool&.close
    end

    # Counts SlowStatements' markings (every time a statement is found running long).
    module MarkingCounter
      class << self
        attr_accessor :count
      end
      self.count = 0

      private

      def remember(*) # (sql), or (sql, seconds) since SlowStatements keeps how long
        MarkingCounter.count += 1
        super
      end
    end
    Weft::Postgres::SlowStatements.prepend(MarkingCounter)

    # Fibers that keep the reactor busy: each spins for `spin` seconds, then yields, until
    # stopped; #cpu is the thread CPU time they spun.
    class Busy
      # @return [Float] seconds of CPU spent spinning
      attr_reader :cpu

      def initialize(fibers, spin)
        @stop = false
        @cpu = 0.0
        @tasks = Array.new(fibers) do
          Weft.spawn do
            until @stop
              started = Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID)
              spin_until = PostgresBench.now + spin
              nil while PostgresBench.now < spin_until
              @cpu += Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID) - started
              sleep 0
            end
          end
        end
      end

      def stop
        @stop = true
        Weft.gather(@tasks)
      end
    end

    def snapshot
      times = Process.times
      { wall: PostgresBench.now, cpu_user: times.utime, cpu_system: times.stime,
        allocated: GC.stat(:total_allocated_objects), gc: GC.stat(:count), minor: GC.stat(:minor_gc_count),
        marked: MarkingCounter.count }
    end

    def delta(before, after)
      after.to_h { |key, value| [key, value - before[key]] }
    end

    def profiled(&block)
      path = ENV["WEFT_STACKPROF"]
      return yield unless path
      require "stackprof"
      StackProf.run(mode: :cpu, interval: Integer(ENV.fetch("WEFT_STACKPROF_INTERVAL", 200)), raw: true, out: path, &block)
    end

    # Runs the block with allocation tracing on and the GC off (when WEFT_ALLOCATIONS is set), so
    # that every object allocated meanwhile is there to be counted by #allocation_sites.
    def traced
      return yield unless ENV["WEFT_ALLOCATIONS"]
      require "objspace"
      GC.start
      GC.disable
      @generation = GC.count
      ObjectSpace.trace_object_allocations { yield }
    end

    # @return [String] objects allocated per statement by class and site, those at 0.01 or more
    def allocation_sites(statements)
      return "" unless @generation
      sites = Hash.new(0)
      ObjectSpace.each_object do |object|
        next unless ObjectSpace.allocation_generation(object) == @generation
        file = ObjectSpace.allocation_sourcefile(object) or next
        klass = Kernel.instance_method(:class).bind_call(object)
        sites["#{klass} #{file.sub(%r{\A.*/(?=(lib|gems|bench)/)}, '')}:#{ObjectSpace.allocation_sourceline(object)}"] += 1
      end
      GC.enable
      sites.sort_by { |_, n| -n }.filter_map do |site, n|
        format("%.2f %s\n", n.to_f / statements, site) if n >= statements / 100
      end.join.prepend("objects allocated per statement by site:\n")
    end

    # The calls that the VM makes without a method call unless a TracePoint watches (specialized
    # instructions), which WEFT_CALLS counts apart.
    INLINED_CALLS = %w[
      Integer#+ Integer#- Integer#< Integer#> Integer#<= Integer#>= Integer#== Float#+ Float#- Float#<
      Float#> Float#<= Float#>= Array#size Array#[] Array#empty? Array#<< Kernel#nil? NilClass#nil?
      BasicObject#! BasicObject#== BasicObject#!= Hash#[] Hash#[]= Hash#empty? Hash#size Symbol#==
    ].freeze

    # Runs the block counting every call by method (when WEFT_CALLS is set), with the stall check
    # off (see the file's comment).
    def calls_counted
      return yield unless ENV["WEFT_CALLS"]
      stall_after = Weft::Postgres::Pool::STALL_AFTER
      silence_constant_redefinition { Weft::Postgres::Pool.const_set(:STALL_AFTER, 3600.0) }
      @calls = Hash.new(0)
      point = TracePoint.new(:call, :c_call, :b_call) do |trace|
        @calls[trace.event == :b_call ? "(block)" : "#{trace.defined_class}##{trace.method_id}"] += 1
      end
      point.enable
      yield
    ensure
      point&.disable
      silence_constant_redefinition { Weft::Postgres::Pool.const_set(:STALL_AFTER, stall_after) } if stall_after
    end

    def silence_constant_redefinition
      verbose = $VERBOSE
      $VERBOSE = nil
      yield
    ensure
      $VERBOSE = verbose
    end

    # @return [String] calls per statement (WEFT_CALLS): all, those the VM inlines untraced, the
    #   rest, and the methods called 0.5 times or more per statement
    def call_counts(statements)
      return "" unless @calls
      per = ->(n) { n.to_f / statements }
      total = @calls.values.sum
      inlined = @calls.sum { |name, n| INLINED_CALLS.include?(name) ? n : 0 }
      top = @calls.reject { |name, _| INLINED_CALLS.include?(name) }.select { |_, n| per[n] >= 0.5 }.sort_by { |_, n| -n }
      format("calls per statement: %.1f, of which %.1f inlined untraced: %.1f calls\n",
             per[total], per[inlined], per[total - inlined]) +
        top.map { |name, n| format("  %6.2f %s\n", per[n], name) }.join
    end

    # Runs the block with callgrind collecting (when WEFT_CALLGRIND is set): callgrind's
    # client request, which only C can make, from a two-line library built before the run
    # (#callgrind_toggle).
    def instructions_counted
      return yield unless @toggle
      @toggle.call
      begin
        yield
      ensure
        @toggle.call
      end
    end

    # @return [Fiddle::Function, nil] what switches callgrind's collecting on and off, built
    #   when WEFT_CALLGRIND is set (outside the reactor: it writes a file and runs the compiler)
    def callgrind_toggle
      return nil unless ENV["WEFT_CALLGRIND"]
      require "fiddle"
      require "tmpdir"
      Dir.mktmpdir("weft-callgrind") do |dir|
        File.write("#{dir}/toggle.c", "#include <valgrind/callgrind.h>\nvoid toggle(void) { CALLGRIND_TOGGLE_COLLECT; }\n")
        system("cc", "-shared", "-fPIC", "-o", "#{dir}/toggle.so", "#{dir}/toggle.c", exception: true)
        Fiddle::Function.new(Fiddle.dlopen("#{dir}/toggle.so")["toggle"], [], Fiddle::TYPE_VOID)
      end
    end

    # Runs the block counting fiber switches and calls of COUNTED (when WEFT_COUNT is set).
    # @return [Hash] name => count
    def counted
      return [yield, {}].last unless ENV["WEFT_COUNT"]
      counts = Hash.new(0)
      wanted = COUNTED.to_h { |owner, name| [[Object.const_get(owner), name.to_sym], "#{owner}##{name}"] }
      points = [
        TracePoint.new(:fiber_switch) { counts["fiber switches"] += 1 },
        TracePoint.new(:call, :c_call) do |trace|
          name = wanted[[trace.defined_class, trace.method_id]]
          counts[name] += 1 if name
        end,
      ]
      points.each(&:enable)
      yield
      counts
    ensure
      points&.each(&:disable)
    end

    def report(count, figures, statistics)
      per = ->(value) { format("%.2f", value * 1e6 / count) }
      busy = ENV.fetch("WEFT_BUSY", "0")
      <<~TEXT
        statements: #{count} in #{format('%.2f', figures[:wall])} s = #{PostgresBench.format_number(count / figures[:wall])}/s
        CPU per statement (µs): user #{per[figures[:cpu_user]]}, system #{per[figures[:cpu_system]]}#{busy == '0' ? '' : ", spinners' #{per[figures[:spun]]} taken out of user+system: #{per[figures[:cpu_user] + figures[:cpu_system] - figures[:spun]]}"}
        statements found running long (marked slow): #{figures[:marked]} (#{busy} spinning fibers)
        objects allocated per statement: #{format('%.1f', figures[:allocated].to_f / count)}
        GC runs: #{figures[:gc]} (#{figures[:minor]} minor)
        pool: #{statistics.slice(:queries, :pipelined, :max_depth, :connects).map { |k, v| "#{k}=#{v}" }.join(' ')}
        malloc: #{allocator}
      TEXT
    end

    # The allocator this process's malloc goes to: a jemalloc or tcmalloc preloaded
    # (LD_PRELOAD; docs/postgres.md, "Deployment: the memory allocator"), else glibc's, with
    # the MALLOC_* and GLIBC_TUNABLES settings it was given.
    def allocator
      maps = File.exist?("/proc/self/maps") ? File.read("/proc/self/maps") : ""
      name = maps[/lib(jemalloc|tcmalloc\w*)\.so/, 1] || "the C library's"
      settings = ENV.select { |key, _| key.start_with?("MALLOC_") || key == "GLIBC_TUNABLES" }
      [name, *settings.map { |key, value| "#{key}=#{value}" }].join(" ")
    end
  end
end

puts PostgresBench::PoolProfile.run(Integer(ARGV.fetch(0, 5))) if $PROGRAM_NAME == __FILE__
