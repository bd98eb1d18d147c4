# frozen_string_literal: true

# Where a Rails request's CPU goes, server against server (issue #13): the Rails app of
# bench/postgres/rails_bench.rb, loaded through bench/postgres/rails_profile.ru, under each
# server in turn with the benchmark's closed loop (wrk -c200, 5 PostgreSQL connections), and
# measured from inside the process that serves, over a window from 2 s into the loop to 1 s
# before its end: CPU per request answered, objects allocated and GC runs per request, what set
# off each major GC, RubyVM.stat's counters per request, live slots and old objects at the end.
#
#   bundle exec ruby bench/postgres/rails_profile.rb [seconds] [rounds]
#
# Environment: BENCH_SERVERS (default "weft,falcon"; the servers take turns, `rounds` times,
# each on its own freshly seeded database), BENCH_C (200), PROFILE_TOP (frames or symbols
# printed, 30), and each of these adds a measurement (and its own cost: compare CPU figures
# only between runs with the same ones):
#   PROFILE_MODE=cpu|wall|object   a StackProf profile (raw; top frames printed, dump kept;
#                                  PROFILE_INTERVAL in µs or objects)
#   PROFILE_PERF=1                 `perf record` of the window, YJIT's code named (--yjit-perf=map)
#   PROFILE_STRACE=1               the system calls (strace -c -f)
#   PROFILE_YJIT=1                 YJIT's counters per request (--yjit-stats; dumped)
#   PROFILE_CALLS=1                every method, C function and block called (TracePoint; dumped)
#   PROFILE_SWITCHES=1             fiber switches per request (TracePoint)
#   PROFILE_SINGLETONS=1           objects with a singleton class of their own, by class
#   PROFILE_HEAP=1                 the ActiveRecord adapters alive at the window's end

require "tmpdir"
require_relative "rails_bench"

module PostgresBench
  # Runs the closed loop with the in-process window and reports it.
  module RailsProfile
    RU = File.join(__dir__, "rails_profile.ru")
    # Seconds of the loop left out at its start (200 requests admitted at once) and at its end.
    SKIP_START = 2
    SKIP_END = 1

    module_function

    # @return [Hash] :wrk (wrk's figures), :window (the counters' differences), :dump (the
    #   profile's path, when profiled)
    def measure(name, seconds, connections, round)
      RailsBench.prepare(name)
      database = "weft_rails_#{name}"
      control = File.join(Dir.tmpdir, "weft-rails-profile-#{Process.pid}-#{name}.control")
      out = File.join(Dir.tmpdir, "weft-rails-profile-#{Process.pid}-#{name}.out")
      [control, out].each { |path| File.delete(path) if File.exist?(path) }
      env = RailsBench.environment(name).merge("PROFILE_CONTROL" => control, "PROFILE_OUT" => out,
                                               "PROFILE_MODE" => ENV.fetch("PROFILE_MODE", nil))
      env["RUBYOPT"] = "#{ENV.fetch('RUBYOPT', nil)} --yjit-perf=map".strip if ENV["PROFILE_PERF"] && defined?(RubyVM::YJIT)
      env["RUBYOPT"] = "#{env['RUBYOPT'] || ENV.fetch('RUBYOPT', nil)} --yjit-stats=quiet".strip if ENV["PROFILE_YJIT"] && defined?(RubyVM::YJIT)
      app_ru = File.join(RailsBench::APP, "config.ru")
      command = ->(port) { RailsBench.server(name)[:command].call(port).map { |arg| arg == app_ru ? RU : arg } }
      HttpBench.serve("rails-profile-#{name}", command, env) do |port, _log|
        url = "http://127.0.0.1:#{port}/"
        HttpBench.wrk_url(url, 3, 20, script: RailsBench::SCRIPT, script_args: ["warm-up", RailsBench::AUTHORS.to_s])
        RailsBench.wait_idle(database)
        started = Time.now.to_f
        File.write(control, "#{started + SKIP_START} #{started + seconds - SKIP_END}")
        pid = File.read("#{control}.pid").to_i
        strace = tracing_syscalls(pid, SKIP_START, seconds - SKIP_START - SKIP_END) if ENV["PROFILE_STRACE"]
        perf = perf_profile(pid, SKIP_START, seconds - SKIP_START - SKIP_END, "#{name}-#{round}") if ENV["PROFILE_PERF"]
        wrk = HttpBench.wrk_url(url, seconds, connections, script: RailsBench::SCRIPT,
                                                           script_args: ["closed#{round}", RailsBench::AUTHORS.to_s])
        sleep 0.1 until File.size?(out)
        data = Marshal.load(File.binread(out)) # rubocop:disable Security/MarshalLoad
        window = window(data)
        dump = nil
        if data[:profile]
          dump = File.join(Dir.tmpdir, "weft-rails-profile-#{name}-#{round}.dump")
          File.binwrite(dump, Marshal.dump(data[:profile]))
        end
        window[:majors] = data[:majors]
        window[:singletons] = data[:singletons]
        window[:switches] = data[:switches].fdiv(window[:requests]) if data[:switches]
        if ENV["PROFILE_YJIT"]
          window[:yjit] = yjit_window(data)
          File.binwrite(File.join(Dir.tmpdir, "weft-rails-profile-#{name}-#{round}.yjit"), Marshal.dump(data.slice(:before, :after)))
        end
        if data[:calls]
          dump = File.join(Dir.tmpdir, "weft-rails-profile-#{name}-#{round}.calls")
          File.binwrite(dump, Marshal.dump(data[:calls]))
          window[:calls] = data[:calls].values.sum.fdiv(window[:requests])
        end
        { wrk: wrk, window: window, dump: dump, profile: data[:profile], strace: strace&.value, perf: perf&.value }
      end
    end

    # With PROFILE_STRACE=1: `strace -c -f` on the serving process over the window (it slows
    # the process, so the window's CPU figures are then not comparable with runs without it).
    # @return [Thread] its value: strace's summary table
    def tracing_syscalls(pid, after, seconds)
      Thread.new do
        sleep after
        Open3.capture2e("timeout", "-s", "INT", seconds.to_s, "strace", "-c", "-f", "-p", pid.to_s).first
      end
    end

    # With PROFILE_PERF=1: `perf record` of the serving process over the window (YJIT's code
    # named through its perf map), its hottest symbols by samples taken in them.
    # @return [Thread] its value: perf report's lines
    def perf_profile(pid, after, seconds, tag)
      Thread.new do
        sleep after
        data = File.join(Dir.tmpdir, "weft-rails-profile-#{tag}.perf")
        Open3.capture2e("perf", "record", "-F", "1999", "-p", pid.to_s, "-o", data, "--", "sleep", seconds.to_s)
        report = Open3.capture2e("perf", "report", "-i", data, "--no-children", "--sort", "sym", "--stdio").first
        lines = report.lines.reject { |line| line.start_with?("#") || line.strip.empty? }
        "perf: #{data}\n#{lines.first(Integer(ENV.fetch('PROFILE_TOP', '30'))).join}"
      end
    end

    # With PROFILE_YJIT=1 (the server run with --yjit-stats): YJIT's counters over the window,
    # per request, and the side exits that grew most.
    def yjit_window(data)
      before, after = data[:before][:yjit], data[:after][:yjit]
      requests = data[:after][:requests] - data[:before][:requests]
      delta = ->(key) { (after[key] || 0) - (before[key] || 0) }
      insns = delta.(:yjit_insns_count) + delta.(:vm_insns_count)
      exits = after.keys.grep(/\Aexit_|\A[a-z_]+_exit_/).map { |key| [key, delta.(key)] }.reject { |_, count| count.zero? }
      { ratio_in_yjit: insns.zero? ? nil : delta.(:yjit_insns_count) * 100.0 / insns,
        vm_insns: delta.(:vm_insns_count).fdiv(requests), yjit_insns: delta.(:yjit_insns_count).fdiv(requests),
        side_exits: delta.(:side_exit_count).fdiv(requests), invalidations: delta.(:invalidation_count),
        compiled_iseqs: delta.(:compiled_iseq_count), compiled_blocks: delta.(:compiled_block_count),
        top_exits: exits.sort_by { |_, count| -count }.first(15).to_h { |key, count| [key, count.fdiv(requests).round(2)] } }
    end

    # The counters' differences over the window, per request answered.
    def window(data)
      before, after = data.values_at(:before, :after)
      requests = after[:requests] - before[:requests]
      { requests: requests, pid: after[:pid], seconds: nil,
        cpu_ms: (after[:cpu] - before[:cpu]) * 1000 / requests,
        user_ms: (after[:user] - before[:user]) * 1000 / requests,
        system_ms: (after[:system] - before[:system]) * 1000 / requests,
        objects: (after[:allocated] - before[:allocated]).fdiv(requests),
        minor_per_1k: (after[:minor] - before[:minor]) * 1000.0 / requests,
        major_per_1k: (after[:major] - before[:major]) * 1000.0 / requests,
        gc_ms: (after[:gc_ms] - before[:gc_ms]).fdiv(requests),
        live: after[:live], old: after[:old], adapters: after[:adapters],
        vm: after[:vm].to_h { |key, value| [key, (value - before[:vm][key]).fdiv(requests).round(2)] } }
    end

    # The profile's top frames by samples taken in them (self) and under them (total).
    def top(profile, count)
      frames = profile[:frames]
      samples = profile[:samples].to_f
      lines = frames.values.sort_by { |frame| -frame[:samples] }.first(count).map do |frame|
        format("%6.2f%% %6.2f%%  %s (%s:%s)", frame[:samples] * 100 / samples, frame[:total_samples] * 100 / samples,
               frame[:name], frame[:file].to_s.sub(%r{\A.*/gems/}, ""), frame[:line])
      end
      "#{profile[:mode]} mode, #{profile[:samples]} samples (self%, total%):\n#{lines.join("\n")}"
    end

    def run(seconds, rounds)
      HttpBench.raise_file_limit
      names = HttpBench.list("BENCH_SERVERS", "weft,falcon")
      connections = Integer(ENV.fetch("BENCH_C", "200"))
      rounds.times do |round|
        names.each do |name|
          load_before = File.read("/proc/loadavg").split.first
          result = measure(name, seconds, connections, round)
          load_after = File.read("/proc/loadavg").split.first
          w = result[:window]
          puts format("%-7s round %d  load %s -> %s  wrk %.1f req/s  window: %d requests, %.3f ms CPU (user %.2f, system %.2f), " \
                      "%.0f objects, " \
                      "%.2f minor + %.2f major GC per 1k requests, %.3f ms GC per request", name, round + 1, load_before,
                      load_after, result[:wrk][:rps], w[:requests], w[:cpu_ms], w[:user_ms], w[:system_ms], w[:objects], w[:minor_per_1k],
                      w[:major_per_1k], w[:gc_ms])
          puts "        major GCs by cause: #{w[:majors].inspect}" unless w[:majors].empty?
          puts "        RubyVM.stat per request: #{w[:vm].inspect}"
          puts format("        at the window's end: %d live slots, %d old objects%s", w[:live], w[:old],
                      w[:adapters] ? ", #{w[:adapters]} ActiveRecord adapters" : "")
          puts "        objects with a singleton class, by class: #{w[:singletons].inspect}" if w[:singletons]
          puts "        YJIT: #{w[:yjit].inspect}" if w[:yjit]
          puts format("        %.1f fiber switches per request", w[:switches]) if w[:switches]
          puts format("        %.0f calls per request (methods, C functions, blocks); dump: %s", w[:calls], result[:dump]) if w[:calls]
          puts result[:strace] if result[:strace]
          puts result[:perf] if result[:perf]
          next unless result[:profile]
          puts top(result[:profile], Integer(ENV.fetch("PROFILE_TOP", "30")))
          puts "dump: #{result[:dump]}"
        end
      end
    end
  end
end

PostgresBench::RailsProfile.run(Integer(ARGV.fetch(0, 10)), Integer(ARGV.fetch(1, 1))) if $PROGRAM_NAME == __FILE__
