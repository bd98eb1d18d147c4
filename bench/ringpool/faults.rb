# frozen_string_literal: true

require_relative "fault_report"
require_relative "front"

module RingpoolBench
  # The fault runs of issue #10 (`bench/ringpool/run --faults`): for each of SERVERS, JMeter at a
  # fixed FAULT_RATE for FAULT_SECONDS while, FAULT_AT seconds in,
  #
  #   stall        shard 1's process is SIGSTOPped for STALL_SECONDS, then SIGCONTed
  #   pg_restart   PostgreSQL restarts (pg_ctl restart -m fast: every connection is cut)
  #
  # and afterwards the allocations table is checked for a number handed out twice within a
  # lockout. Writes bench/results/ringpool-faults.md (OUT; ringpool-faults-ruby-3.3.md on Ruby
  # 3.3): latency and overflow second by second around each fault, per server.
  #
  #   FAULT_RATE=100  FAULT_SECONDS=40  FAULT_AT=12  STALL_SECONDS=10  (and run.rb's POOLS, SIZES,
  #   LOCKOUT, ITEMS, BODIES, SEED, SHARDS, SERVERS, HEADROOM, RAMP, TIMEOUT_MS)
  #
  # FRONT=haproxy: JMeter talks to HAProxy in front of the shards instead of to the shards'
  # shared listener (Front; FRONT_TIMEOUT_MS, FRONT_CHECK_MS); Puma and Falcon then run a
  # single-process server per shard (Server::PROCESS_PER_SHARD). Writes ringpool-faults-front.md.
  module Faults
    SCENARIOS = %w[stall pg_restart].freeze

    # One scenario under one server: the JMeter samples, when the fault began and ended, and the
    # double allocations found afterwards.
    Outcome = Struct.new(:server, :scenario, :samples, :fault_from, :fault_to, :doubles, :described, keyword_init: true)

    # Settings of the fault runs, from the environment.
    Settings = Struct.new(:rate, :seconds, :fault_at, :stall, :out, :front) do
      def self.from_env(env = ENV)
        front = env["FRONT"]
        raise ArgumentError, "FRONT=#{front}: only haproxy is known" unless [nil, "", "haproxy"].include?(front)

        front = nil if front == ""
        new(Integer(env.fetch("FAULT_RATE", "100")), Integer(env.fetch("FAULT_SECONDS", "40")),
            Integer(env.fetch("FAULT_AT", "12")), Integer(env.fetch("STALL_SECONDS", "10")),
            File.expand_path(env.fetch("OUT", Bench::Results.path(front ? "ringpool-faults-front" : "ringpool-faults")), ROOT),
            front)
      end
    end

    module_function

    def run
      config = Config.new(ENV.to_h.merge("OUT" => "unused"))
      settings = Settings.from_env
      front = front_for(config) if settings.front
      raise ArgumentError, "FAULT_AT + STALL_SECONDS must end before FAULT_SECONDS" if settings.fault_at + settings.stall >= settings.seconds

      FileUtils.rm_rf(TMP)
      FileUtils.mkdir_p(TMP)
      Process.setrlimit(:NOFILE, Process.getrlimit(:NOFILE)[1])
      uptime_before = `uptime`.strip
      cluster = Weft::Test::PostgresCluster.new.start
      outcomes = config.servers.flat_map { |name| run_server(config, settings, name, cluster, front) }
      FaultReport.new(config, settings, outcomes, front: front&.description, uptime_before: uptime_before,
                                                  uptime_after: `uptime`.strip).write(settings.out)
      warn "wrote #{settings.out.delete_prefix("#{ROOT}/")}"
    ensure
      cluster&.destroy
    end

    # The HAProxy front of FRONT=haproxy (not started), in front of each server in turn: its
    # shards each on a port of its own, shard_port + index (RINGPOOL_SHARD_PORT, which Weft's
    # processes inherit and Server gives Puma's and Falcon's; picked here when unset).
    # @return [Front]
    def front_for(config)
      ENV["RINGPOOL_SHARD_PORT"] ||= Bench.free_ports(config.shards).to_s
      Front.new(shard_port: Integer(ENV["RINGPOOL_SHARD_PORT"]), shards: config.shards, dir: File.join(TMP, "front"))
    end

    # @param front [Front, nil] started after the server, JMeter's target instead of the server
    # @return [Array<Outcome>] one per scenario
    def run_server(config, settings, name, cluster, front)
      prepared = RingpoolBench.prepare_server(config, name, cluster, shard_port: front&.shard_port)
      server = prepared.server
      if front
        front.start
        warn "ringpool faults: #{front.description} on port #{front.port}"
      end
      jmeter = JMeter.new(File.join(TMP, "launcher"))
      SCENARIOS.map do |scenario|
        outcome = run_scenario(config, settings, scenario, server, cluster, jmeter, prepared.bodies, front&.port || server.port)
        outcome.doubles = doubles(prepared.database_url)
        outcome.described = server.description
        warn "ringpool faults: #{name} #{scenario}: #{outcome.samples.size} requests, #{outcome.doubles} double allocations"
        outcome
      end
    ensure
      front&.stop
      server&.stop
    end

    # Runs JMeter for the whole scenario and injects the fault FAULT_AT seconds after the first
    # request was sent (JMeter's threads take a few seconds to start).
    def run_scenario(config, settings, scenario, server, cluster, jmeter, bodies, port)
      groups, = JMeter.schedules(settings.rate)
      threads = groups.sum { |per_second, _| [(per_second * config.headroom).ceil, 2].max }
      startup = 5 + (threads / 100.0).ceil + config.ramp
      fault = nil
      injector = Thread.new do
        jtl = File.join(TMP, server.name, "#{scenario}.jtl")
        sleep 0.1 until File.exist?(jtl) && File.size(jtl) > 200
        sleep settings.fault_at
        fault = inject(scenario, settings, server, cluster)
      end
      result = jmeter.run(rate: settings.rate, seconds: startup + settings.seconds, headroom: config.headroom, ramp_seconds: config.ramp,
                          port: port,
                          bodies: bodies, timeout_ms: config.timeout_ms, log_prefix: File.join(TMP, server.name, scenario))
      injector.join
      Outcome.new(server: server.name, scenario: scenario, samples: result[:samples].sort_by(&:start),
                  fault_from: fault.first, fault_to: fault.last)
    end

    # @return [(Integer, Integer)] when the fault began and ended, ms since the epoch
    def inject(scenario, settings, server, cluster)
      from = Process.clock_gettime(Process::CLOCK_REALTIME, :millisecond)
      case scenario
      when "stall"
        pid = shard_pid(server, 1)
        Process.kill(:STOP, pid)
        begin
          sleep settings.stall
        ensure
          Process.kill(:CONT, pid)
        end
      when "pg_restart"
        cluster.restart(mode: :fast)
      end
      [from, Process.clock_gettime(Process::CLOCK_REALTIME, :millisecond)]
    end

    # The pid of the process serving shard `index`, from its own health endpoint.
    def shard_pid(server, index)
      socket = UNIXSocket.new(File.join(TMP, server.name, "sockets", "shard-#{index}.sock"))
      socket.write("GET /health HTTP/1.1\r\nHost: shard\r\nConnection: close\r\n\r\n")
      Integer(JSON.parse(socket.read.split("\r\n\r\n", 2).last).fetch("pid"))
    ensure
      socket&.close
    end

    # Pairs of allocations of one number whose lockouts overlap. PostgreSQL's exclusion
    # constraint forbids them; this checks it held.
    def doubles(database_url)
      conn = PG.connect(database_url)
      Integer(conn.exec(<<~SQL).getvalue(0, 0))
        select count(*) from allocations a join allocations b
          on a.number = b.number and a.ctid < b.ctid and a.lockout && b.lockout
      SQL
    ensure
      conn&.close
    end
  end
end
