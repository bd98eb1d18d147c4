# frozen_string_literal: true

require "csv"
require "fileutils"
require "timeout"

module Bench
  # Runs bench/support/open_loop.jmx in Debian's JMeter 2.13 at one fixed rate (open loop: sends
  # leave on a schedule, whatever the answers' latency) and reads its results, one CSV row per
  # request. A benchmark describes its request (a {Request}) and, optionally, what to count in
  # each answer; bench/ringpool and bench/postgres/rails_bench.rb use it.
  class JMeter
    HOME = "/usr/share/jmeter"
    PLAN = File.expand_path("open_loop.jmx", __dir__)
    LAUNCHER = File.expand_path("JMeterLauncher.java", __dir__)
    # The plan's thread groups: each has one schedule of 1000 / k requests/s (whole milliseconds).
    GROUPS = 4
    # The plan's counters (regular expressions counted in each answer's body).
    COUNTERS = 5
    # What an unused counter looks for: nothing (an empty lookahead that must not match).
    NOTHING = "(?!)"
    # A small JVM for a 2-core machine shared with the server: one GC thread, the quick JIT only
    # (JMeter's code is warm within a second or two either way), small thread stacks.
    JVM = %w[-XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Xss256k -Xms256m -Xmx1g -Djava.awt.headless=true].freeze

    # One request as JMeter saw it: start (ms since the epoch), latency (ms, whole), HTTP status
    # (nil when no answer came), the matches of each counted kind, threads running, and why no
    # answer came (JMeter's exception class, e.g. java.net.SocketTimeoutException; nil otherwise).
    Sample = Struct.new(:start, :elapsed, :status, :kinds, :threads, :error)

    # What every request is: `method` to `port` on 127.0.0.1 with a body of `content_type`. `file`
    # holds one request a line, its tab-separated values named by `columns`: "body", and "path"
    # when each request has a path of its own (otherwise every request goes to `path`).
    Request = Struct.new(:port, :method, :path, :content_type, :file, :columns, keyword_init: true)

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

    # @return [Array<Integer>] the threads of each group at `rate`: enough for `headroom` seconds
    #   of latency (Little's law), at least 2
    def self.threads(rate, headroom)
      schedules(rate).first.map { |per_second, _| [(per_second * headroom).ceil, 2].max }
    end

    # @return [Integer] seconds to allow before `threads` threads all run (they start one after
    #   another, some milliseconds each on a busy machine), for a run's duration
    def self.startup_seconds(threads)
      5 + (threads / 100.0).ceil
    end

    # @return [String] JMeter's version, as Debian packaged it
    def self.version
      `dpkg-query -W -f='${Version}' jmeter 2>/dev/null`.strip
    end

    # @return [String] the Java runtime's version line
    def self.java_version
      `java -version 2>&1`.lines.first.to_s.strip.delete('"').sub(/\Aopenjdk version/, "OpenJDK")
    end

    # Compiles the launcher once per run.
    # @param dir [String] where the class goes
    # @param counted [Hash{String=>String}] kind => a regular expression (Java's) whose matches
    #   in each answer's body count as that kind (Sample#kinds); at most COUNTERS
    def initialize(dir, counted: {})
      raise ArgumentError, "at most #{COUNTERS} counted kinds (the plan's counters)" if counted.size > COUNTERS

      @dir = dir
      @counted = counted
      jars = Dir.glob(File.join(HOME, "lib/ext/*.jar")) + Dir.glob(File.join(HOME, "lib/*.jar"))
      @classpath = [File.join(HOME, "bin/ApacheJMeter.jar"), *jars].join(":")
      raise "JMeter is not installed in #{HOME}: apt-get install jmeter jmeter-http default-jdk-headless" if jars.empty?

      FileUtils.mkdir_p(dir)
      ok = system("javac", "-nowarn", "-d", dir, "-cp", @classpath, LAUNCHER, out: File::NULL, err: File.join(dir, "javac.log"))
      raise "javac failed on #{LAUNCHER}: #{File.read(File.join(dir, 'javac.log'))}" unless ok
    end

    # Sends `request` at `rate` for `seconds` (threads start first, which takes a while).
    # @param request [Request]
    # @param headroom [Float] seconds of latency the threads absorb before slots go unused:
    #   each group gets rate × headroom threads (Little's law), at least 2
    # @param ramp_seconds [Integer] seconds over which each group starts its threads: JMeter
    #   sends each thread's first request at once, so with none all threads send together at
    #   the start (see open_loop.jmx); `headroom` (threads / rate) spreads them at about the rate
    # @param timeout_ms [Integer] an answer later than this is a timeout (no status)
    # @param log_prefix [String] where JMeter's results and logs go (prefix + .jtl, .log, .out)
    # @yieldparam pid [Integer] the JVM's, once started
    # @return [Hash] :samples (Array<Sample>), :groups, :offered, :threads, :status (the exit status)
    def run(rate:, seconds:, headroom:, request:, timeout_ms:, log_prefix:, ramp_seconds: 0)
      groups, offered = self.class.schedules(rate)
      threads = self.class.threads(rate, headroom)
      jtl = "#{log_prefix}.jtl"
      FileUtils.rm_f(jtl)
      command = ["java", *JVM, "-Djmeter.home=#{HOME}", "-cp", "#{@dir}:#{@classpath}", "JMeterLauncher",
                 "-n", "-t", PLAN, "-l", jtl, "-j", "#{log_prefix}.log",
                 *properties(request, groups, threads, seconds, ramp_seconds, timeout_ms).map { |name, value| "-J#{name}=#{value}" }]
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
    # the counters as columns, and no retries that would hide an error.
    RESULT_FORMAT = {
      "jmeter.save.saveservice.output_format" => "csv",
      "jmeter.save.saveservice.print_field_names" => "true",
      "jmeter.save.saveservice.label" => "false",
      "jmeter.save.saveservice.response_message" => "false",
      "jmeter.save.saveservice.data_type" => "false",
      "jmeter.save.saveservice.thread_counts" => "true",
      "sampleresult.timestamp.start" => "true",
      "sample_variables" => (1..COUNTERS).map { |counter| "count_#{counter}_matchNr" }.join(","),
      "httpclient4.retrycount" => "0",
      "jmeterengine.nongui.port" => "0",
      "summariser.interval" => "5"
    }.freeze

    private

    # The plan's properties (see the comment at the top of open_loop.jmx).
    def properties(request, groups, threads, seconds, ramp_seconds, timeout_ms)
      properties = { "port" => request.port, "method" => request.method, "path" => request.path || "/",
                     "content_type" => request.content_type, "requests" => request.file, "columns" => request.columns.join(","),
                     "duration" => seconds, "ramp_seconds" => ramp_seconds, "timeout_ms" => timeout_ms }
      groups.each_with_index do |(_, interval), index|
        properties["threads_#{index + 1}"] = threads[index]
        properties["per_minute_#{index + 1}"] = 60_000 / interval
      end
      patterns = @counted.values
      (1..COUNTERS).each { |counter| properties["count_#{counter}"] = patterns[counter - 1] || NOTHING }
      properties.merge(RESULT_FORMAT)
    end

    def read(path)
      CSV.foreach(path, headers: true).map do |row|
        code = row["responseCode"]
        answered = code.match?(/\A\d{3}\z/)
        Sample.new(Integer(row["timeStamp"]), Integer(row["elapsed"]), answered ? Integer(code) : nil,
                   @counted.keys.each_with_index.to_h { |kind, index| [kind, row["count_#{index + 1}_matchNr"].to_i] },
                   row["allThreads"].to_i, answered ? nil : code.sub(/\ANon HTTP response code: /, ""))
      end
    end
  end
end
