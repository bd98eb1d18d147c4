# frozen_string_literal: true

# Where the time of bench/http_client/concurrent.rb goes, per request, for one variant:
#
#   bundle exec ruby bench/http_client/profile.rb VARIANT [LIMIT] [OTHER_CHECKOUT...]
#       VARIANT: kept (one Weft client for every round), cold (a new Weft client per round) or
#       async (Async::HTTP::Client, new per round); LIMIT connections (default 100).
#       ROUNDS=3 measurements per checkout, each MEASURE=20 rounds of 1,000 concurrent GETs
#       after 3 rounds of warm-up, in a fresh process; STRACE=1, FIBERS=1, STACKPROF=1 add
#       system calls, fiber switches and the hottest frames, ALLOCS=1 the objects allocated per
#       request by site (this checkout only); WEFT_OPTIONS='{"name": value}' passes options to
#       Weft::HTTP::Client.new (every checkout given must know them).
#
# Per request it reports the client process's CPU time (user + system, its own clock: unlike
# requests/s it barely moves when other jobs share the machine), the upstream's CPU time (the
# same threaded upstream as concurrent.rb, a process of its own), objects allocated, GC runs,
# and connections opened. With other checkouts of Weft (e.g. `git worktree add --detach
# /tmp/weft-base main`, extensions compiled for this Ruby), each measurement runs from each
# checkout in turn, ROUNDS times: before and after side by side, alternating, so that a change in
# the machine's load hits both.
require_relative "../support/bundle"
require_relative "support"
require_relative "rounds"
require "json"
require "open3"
require "rbconfig"

module ClientProfile
  ROOT = Bench::ROOT
  ROUNDS = Integer(ENV.fetch("ROUNDS", "3"))
  MEASURE = Integer(ENV.fetch("MEASURE", "20"))
  REQUESTS = ConcurrentRounds::REQUESTS

  # Runs in the measuring process: ARGV = variant, limit, port, upstream pid, rounds, the path
  # of rounds.rb (this checkout's: the rounds are the benchmark's, the lib/ the checkout's).
  CLIENT = <<~'RUBY'
    require "etc"
    require "json"
    variant, limit, port, upstream, rounds, rounds_file = ARGV
    require rounds_file
    limit = Integer(limit)
    rounds = Integer(rounds)
    url = "http://127.0.0.1:#{port}"
    # utime + stime of the upstream process, in seconds (/proc/PID/stat fields 14 and 15)
    upstream_cpu = lambda do
      fields = File.read("/proc/#{upstream}/stat").split(") ", 2).last.split
      (Integer(fields[11]) + Integer(fields[12])).to_f / Etc.sysconf(Etc::SC_CLK_TCK)
    end
    # Client options to try (WEFT_OPTIONS='{"max_uses": 100}'), for the Weft variants.
    options = JSON.parse(ENV.fetch("WEFT_OPTIONS", "{}"), symbolize_names: true)
    opened = Hash.new(0)
    round =
      case variant
      when "kept" then ConcurrentRounds.weft_kept(url, limit, opened, **options)
      when "cold" then ConcurrentRounds.weft_cold(url, limit, opened, **options)
      when "async" then ConcurrentRounds.async(url, limit, opened)
      else abort "unknown variant #{variant}"
      end
    3.times { round.call }
    opened.clear
    GC.start
    requests = rounds * ConcurrentRounds::REQUESTS
    gc = GC.stat
    objects = GC.stat(:total_allocated_objects)
    cpu = Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID)
    up = upstream_cpu.call
    wall = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    rounds.times { round.call }
    wall = Process.clock_gettime(Process::CLOCK_MONOTONIC) - wall
    result = {
      rps: requests / wall,
      cpu_us: (Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID) - cpu) * 1e6 / requests,
      upstream_us: (upstream_cpu.call - up) * 1e6 / requests,
      objects: (GC.stat(:total_allocated_objects) - objects).to_f / requests,
      gcs: (GC.stat(:minor_gc_count) - gc[:minor_gc_count] + GC.stat(:major_gc_count) - gc[:major_gc_count]).to_f * 1000 / requests,
      opened: opened.values.sum.to_f / rounds
    }
    if ENV["FIBERS"] == "1"
      switches = 0
      trace = TracePoint.new(:fiber_switch) { switches += 1 }
      trace.enable { round.call }
      result[:fiber_switches] = switches.to_f / ConcurrentRounds::REQUESTS
    end
    if ENV["ALLOCS"] == "1"
      require "objspace"
      GC.disable
      ObjectSpace.trace_object_allocations_start
      round.call
      ObjectSpace.trace_object_allocations_stop
      sites = Hash.new(0)
      ObjectSpace.each_object do |object|
        file = ObjectSpace.allocation_sourcefile(object) or next
        sites["#{object.class} #{file.sub(%r{.*/(lib|gems)/}, '')}:#{ObjectSpace.allocation_sourceline(object)}"] += 1
      end
      ObjectSpace.trace_object_allocations_clear
      GC.enable
      result[:allocations] = sites.sort_by { |_, count| -count }.first(40).map do |site, count|
        format("%6.2f  %s", count.to_f / ConcurrentRounds::REQUESTS, site)
      end
    end
    if ENV["STACKPROF"] == "1"
      require "stackprof"
      require "stringio"
      profile = StackProf.run(mode: :cpu, interval: 200, raw: false) { 10.times { round.call } }
      report = StackProf::Report.new(profile)
      io = StringIO.new
      report.print_text(false, 30, nil, nil, nil, nil, io)
      result[:stackprof] = io.string
    end
    puts JSON.generate(result)
  RUBY

  module_function

  def run(variant, limit, others)
    checkouts = [ROOT, *others.map { |dir| File.expand_path(dir) }]
    port = Bench.free_port
    upstream = Bench.spawn_server([RbConfig.ruby, File.join(__dir__, "upstream.rb"), port.to_s, "0"], port, "profile_upstream")
    puts "#{RUBY_DESCRIPTION}#{' (RUBY_YJIT_ENABLE=1)' if ENV['RUBY_YJIT_ENABLE'] == '1'}; variant #{variant}, " \
         "limit #{limit}, #{MEASURE} rounds of #{REQUESTS} concurrent GETs per measurement; load #{load_average}"
    puts
    puts "| checkout | commit | round | req/s | client CPU µs / req | upstream CPU µs / req | objects / req | " \
         "GCs / 1k req | connections opened / round |"
    puts "|---|---|---:|---:|---:|---:|---:|---:|---:|"
    ROUNDS.times do |round|
      checkouts.each do |checkout|
        figures = JSON.parse(client(checkout, variant, limit, port, upstream, MEASURE))
        puts format("| %s | %s | %d | %.0f | %.1f | %.1f | %.1f | %.2f | %.0f |", checkout, commit(checkout), round + 1,
                    figures["rps"], figures["cpu_us"], figures["upstream_us"], figures["objects"], figures["gcs"],
                    figures["opened"])
        $stdout.flush
      end
    end
    puts "", "load after: #{load_average}"
    extras(variant, limit, port, upstream)
  ensure
    Bench::Processes.stop(upstream)
  end

  # Fiber switches, system calls and the hottest frames, for this checkout, when asked for.
  def extras(variant, limit, port, upstream)
    if %w[FIBERS STACKPROF ALLOCS].any? { |name| ENV[name] == "1" }
      figures = JSON.parse(client(ROOT, variant, limit, port, upstream, 5))
      puts "", format("Fiber switches per request: %.2f", figures["fiber_switches"]) if figures["fiber_switches"]
      if figures["allocations"]
        puts "", "Objects allocated per request by class and site (one round, the GC off):", "", "```",
             figures["allocations"], "```"
      end
      puts "", "StackProf (cpu, 10 rounds):", "", "```", figures["stackprof"], "```" if figures["stackprof"]
    end
    return unless ENV["STRACE"] == "1"
    summary = File.join(ROOT, "tmp", "client-profile-strace.txt")
    Dir.mkdir(File.dirname(summary)) unless Dir.exist?(File.dirname(summary))
    client(ROOT, variant, limit, port, upstream, MEASURE, prefix: ["strace", "-c", "-f", "-o", summary],
                                                          env: { "FIBERS" => nil, "STACKPROF" => nil, "ALLOCS" => nil })
    requests = (MEASURE + 3) * REQUESTS
    puts "", "System calls per request (`strace -c -f`, warm-up included; those at 0.01 or more):", ""
    File.foreach(summary) do |line|
      fields = line.split
      next unless fields.size >= 5 && fields[3] =~ /\A\d+\z/
      calls = fields[3].to_f / requests
      puts format("- %s %.2f", fields.last, calls) unless fields.last == "total" || calls < 0.01
    end
  end

  # @return [String] the client's JSON line
  def client(checkout, variant, limit, port, upstream, rounds, prefix: [], env: {})
    env = { "BUNDLE_GEMFILE" => WeftGemfile.for_ruby(checkout) }.merge(env)
    out, status = Open3.capture2(env, *prefix, RbConfig.ruby, "-I", File.join(checkout, "lib"), "-e", CLIENT,
                                 variant, limit.to_s, port.to_s, upstream.to_s, rounds.to_s, File.join(__dir__, "rounds.rb"),
                                 chdir: checkout)
    raise "client failed in #{checkout}" unless status.success?
    out.lines.last
  end

  def load_average
    File.read("/proc/loadavg").split.first(3).join(" ")
  end

  def commit(checkout)
    `git -C #{checkout} rev-parse --short HEAD`.strip
  end
end

ClientProfile.run(ARGV.fetch(0, "kept"), Integer(ARGV.fetch(1, "100")), ARGV.drop(2)) if $PROGRAM_NAME == __FILE__
