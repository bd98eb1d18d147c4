# frozen_string_literal: true

require "csv"
require "fileutils"
require "timeout"

module RingpoolBench
  # Runs bench/ringpool/allocations.jmx in Debian's JMeter 2.13 at one fixed rate and reads its
  # results (one CSV row per request).
  class JMeter
    HOME = "/usr/share/jmeter"
    PLAN = File.expand_path("allocations.jmx", __dir__)
    LAUNCHER = File.expand_path("JMeterLauncher.java", __dir__)
    # The plan's thread groups: each has one schedule of 1000 / k requests/s (whole milliseconds).
    GROUPS = 4
    # The item kinds the plan counts in each answer (its regular expression extractors).
    KINDS = %w[tracked exhausted shard_unavailable storage_unavailable item_error].freeze
    # A small JVM for a 2-core machine shared with the server: one GC thread, the quick JIT only
    # (JMeter's code is warm within a second or two either way), small thread stacks.
    JVM = %w[-XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Xss256k -Xms256m -Xmx1g -Djava.awt.headless=true].freeze

    # One request as JMeter saw it: start (ms since the epoch), latency (ms, whole), HTTP status
    # (nil when no answer came: a timeout, a reset), the items of each kind, threads running.
    Sample = Struct.new(:start, :elapsed, :status, :kinds, :threads)

    # Splits a rate into at most GROUPS schedules of 1000 / k requests/s, largest first.
    # @return [Array(Array<Array(Float, Integer)>, Float)] [[requests/s, ms between slots], ...]
    #   and the rate they add up to (within a fraction of a percent of `rate`)
    def self.schedules(rate)
      raise ArgumentError, "rate #{rate} above #{GROUPS * 1000} requests/s (#{GROUPS} groups of at most 1,000)" if rate > GROUPS * 1000

      left = rate.to_f
      groups = []
      GROUPS.times do
        break if left < 0.5

        interval = (1000 / left).ceil
        groups << [1000.0 / interval, interval]
        left -= 1000.0 / interval
      end
      [groups, groups.sum(&:first)]
    end

    # @return [String] JMeter's version, as Debian packaged it
    def self.version
      `dpkg-query -W -f='${Version}' jmeter 2>/dev/null`.strip
    end

    # Compiles the launcher once per run.
    # @param dir [String] where the class goes
    def initialize(dir)
      @dir = dir
      jars = Dir.glob(File.join(HOME, "lib/ext/*.jar")) + Dir.glob(File.join(HOME, "lib/*.jar"))
      @classpath = [File.join(HOME, "bin/ApacheJMeter.jar"), *jars].join(":")
      raise "JMeter is not installed in #{HOME}: bench/ringpool/run installs it (apt-get install jmeter jmeter-http)" if jars.empty?

      FileUtils.mkdir_p(dir)
      ok = system("javac", "-nowarn", "-d", dir, "-cp", @classpath, LAUNCHER, out: File::NULL, err: File.join(dir, "javac.log"))
      raise "javac failed on #{LAUNCHER}: #{File.read(File.join(dir, 'javac.log'))}" unless ok
    end

    # Sends POST /allocations at `rate` for `seconds` (threads start first, which takes a while).
    # @param headroom [Float] seconds of latency the threads absorb before slots go unused:
    #   each group gets rate × headroom threads (Little's law), at least 2
    # @param log_prefix [String] where JMeter's results and logs go (prefix + .jtl, .log, .out)
    # @return [Hash] :samples (Array<Sample>), :groups, :offered, :threads, :pid_cpu (the JVM's
    #   CPU seconds), :status (the exit status)
    def run(rate:, seconds:, headroom:, port:, bodies:, timeout_ms:, log_prefix:)
      groups, offered = self.class.schedules(rate)
      threads = groups.map { |per_second, _| [(per_second * headroom).ceil, 2].max }
      properties = { "port" => port, "bodies" => bodies, "duration" => seconds, "timeout_ms" => timeout_ms }
      groups.each_with_index do |(_, interval), index|
        properties["threads_#{index + 1}"] = threads[index]
        properties["per_minute_#{index + 1}"] = 60_000 / interval
      end
      jtl = "#{log_prefix}.jtl"
      FileUtils.rm_f(jtl)
      command = ["java", *JVM, "-Djmeter.home=#{HOME}", "-cp", "#{@dir}:#{@classpath}", "JMeterLauncher",
                 "-n", "-t", PLAN, "-l", jtl, "-j", "#{log_prefix}.log",
                 *properties.merge(RESULT_FORMAT).map { |name, value| "-J#{name}=#{value}" }]
      pid = Process.spawn(*command, out: "#{log_prefix}.out", err: [:child, :out], pgroup: true)
      yield pid if block_given?
      status = Timeout.timeout(seconds + 120) { Process.wait2(pid).last }
      pid = nil
      raise "JMeter wrote no results (exit #{status.exitstatus}); see #{log_prefix}.out and .log" unless File.exist?(jtl)

      { samples: read(jtl), groups: groups, offered: offered, threads: threads.sum, status: status }
    ensure
      if pid
        Process.kill(:KILL, -pid)
        Process.wait(pid)
      end
    end

    # JMeter properties for the results file: CSV with a header, start times (not end times),
    # the counts of the plan's extractors as columns, and no retries that would hide an error.
    RESULT_FORMAT = {
      "jmeter.save.saveservice.output_format" => "csv",
      "jmeter.save.saveservice.print_field_names" => "true",
      "jmeter.save.saveservice.label" => "false",
      "jmeter.save.saveservice.response_message" => "false",
      "jmeter.save.saveservice.data_type" => "false",
      "jmeter.save.saveservice.thread_counts" => "true",
      "sampleresult.timestamp.start" => "true",
      "sample_variables" => KINDS.map { |kind| "#{kind}_matchNr" }.join(","),
      "httpclient4.retrycount" => "0",
      "jmeterengine.nongui.port" => "0",
      "summariser.interval" => "5"
    }.freeze

    private

    def read(path)
      CSV.foreach(path, headers: true).map do |row|
        status = row["responseCode"]
        Sample.new(Integer(row["timeStamp"]), Integer(row["elapsed"]), status.match?(/\A\d{3}\z/) ? Integer(status) : nil,
                   KINDS.to_h { |kind| [kind, row["#{kind}_matchNr"].to_i] }, row["allThreads"].to_i)
      end
    end
  end
end
