# frozen_string_literal: true

require "json"
require "time"
require "fileutils"

module Weft
  class Server
    # Counters of one server process, and their rendering as JSON and Prometheus text.
    #
    # In cluster mode each worker writes its snapshot to a file in the control directory about
    # once a second (Statistics::Board); the stats endpoint of any worker then shows them all,
    # during a hot restart the previous master generation's workers too, labelled.
    class Statistics
      COUNTERS = %i[requests responses_5xx client_errors parse_errors connections_accepted connections_reclaimed].freeze

      attr_reader(*COUNTERS)
      # @return [Integer] requests being processed now: begun (#request_started!), not finished
      attr_reader :in_flight

      # @param server [Server] read for the gauges (open and idle connections)
      def initialize(server)
        @server = server
        @started = Time.now
        COUNTERS.each { |name| instance_variable_set(:"@#{name}", 0) }
        @in_flight = 0
      end

      # Counting, one method per counter (called by the server and its connections).

      # A request's app is about to be called: it counts, and is in flight until
      # #request_finished!. The two are called by whoever runs the request: RackAdapter, or
      # HTTP1::FastPath for the requests it answers by itself.
      def request_started!
        @requests += 1
        @in_flight += 1
      end

      # The request's response is written, or it failed.
      def request_finished!
        @in_flight -= 1
      end

      # A response with a 5xx status: the app's, or an error answer the server sent for its own
      # fault.
      def server_error!
        @responses_5xx += 1
      end

      # An error answer the server sent for the client's fault (a head too slow or too large, a
      # body too large...), before any app saw the request.
      def client_error!
        @client_errors += 1
      end

      # A request head the parser refused (malformed or oversized); its answer also counts in
      # #client_error!.
      def parse_error!
        @parse_errors += 1
      end

      # A connection accepted.
      def accepted!
        @connections_accepted += 1
      end

      # An idle keep-alive connection closed to admit a new one at max_connections.
      def reclaimed!
        @connections_reclaimed += 1
      end

      # @return [Hash] this process's numbers
      def snapshot
        scheduler = Weft.scheduler&.statistics || {}
        {
          pid: Process.pid,
          worker: @server.worker_index,
          started_at: @started.utc.iso8601,
          uptime: (Time.now - @started).round(3),
          requests: @requests,
          in_flight: @in_flight,
          connections_open: @server.open_connections,
          connections_idle: @server.idle_pool.size,
          connections_hijacked: @server.hijacked_connections,
          connections_accepted: @connections_accepted,
          connections_reclaimed: @connections_reclaimed,
          responses_5xx: @responses_5xx,
          client_errors: @client_errors,
          parse_errors: @parse_errors,
          fibers: scheduler[:tasks],
          reactor_lag: scheduler[:lag]&.round(6),
          reactor_max_lag: scheduler[:max_lag]&.round(6),
          reactor_stalls: @server.reactor_stalls,
          accepts_deferred: @server.accepts_deferred,
          rss_bytes: Statistics.rss,
          **Statistics.circuit_breakers
        }
      end

      # The state and counters of every registered Weft::CircuitBreaker, only when the
      # application loaded weft/resilience (the server does not load it).
      # @return [Hash] { circuit_breakers: [Hash, ...] }, or {} without weft/resilience
      def self.circuit_breakers
        return {} unless defined?(Weft::CircuitBreaker)
        { circuit_breakers: Weft::CircuitBreaker.statistics }
      end

      # @return [Integer, nil] resident set size of this process
      def self.rss
        status = File.read("/proc/self/status")
        kb = status[/^VmRSS:\s+(\d+)/, 1]
        kb && kb.to_i * 1024
      rescue SystemCallError
        nil
      end

      # @return [Array<Hash>] snapshots of every worker (just this process outside a cluster)
      def all
        board = @server.board
        return [snapshot] unless board
        board.publish(snapshot)
        board.read
      end

      # @return [String] JSON for the stats endpoint
      def to_json(*)
        workers = all
        totals = {}
        %i[requests in_flight connections_open connections_idle connections_hijacked connections_accepted connections_reclaimed
           responses_5xx client_errors parse_errors fibers reactor_stalls accepts_deferred].each do |key|
          totals[key] = workers.sum { |worker| worker[key].to_i }
        end
        JSON.generate({ totals: totals, workers: workers })
      end

      # @return [String] Prometheus text exposition format (version 0.0.4)
      def to_prometheus
        out = +""
        metrics = {
          requests: ["counter", "weft_requests_total", "Requests answered"],
          in_flight: ["gauge", "weft_requests_in_flight", "Requests being processed"],
          connections_open: ["gauge", "weft_connections_open", "Open client connections"],
          connections_idle: ["gauge", "weft_connections_idle", "Keep-alive connections parked without a fiber"],
          connections_hijacked: ["gauge", "weft_connections_hijacked",
                                 "Connections the application took over (rack.hijack, streaming bodies), not closed yet"],
          connections_accepted: ["counter", "weft_connections_accepted_total", "Connections accepted"],
          connections_reclaimed: ["counter", "weft_connections_reclaimed_total",
                                  "Idle keep-alive connections closed to admit new ones at max_connections"],
          responses_5xx: ["counter", "weft_responses_5xx_total", "Responses with a 5xx status"],
          client_errors: ["counter", "weft_client_errors_total", "Requests refused for bad input or timeouts"],
          parse_errors: ["counter", "weft_parse_errors_total", "Malformed requests"],
          fibers: ["gauge", "weft_fibers", "Live reactor tasks"],
          reactor_lag: ["gauge", "weft_reactor_lag_seconds", "Last reactor turn's busy time"],
          reactor_max_lag: ["gauge", "weft_reactor_max_lag_seconds", "Longest reactor turn"],
          reactor_stalls: ["counter", "weft_reactor_stalls_total", "Times one piece of code held the reactor past stall_threshold"],
          accepts_deferred: ["counter", "weft_accepts_deferred_total",
                             "Queued connections left for a moment to a worker with fewer connections"],
          rss_bytes: ["gauge", "weft_process_resident_memory_bytes", "Resident set size"]
        }
        workers = all
        metrics.each do |key, (type, name, help)|
          out << "# HELP #{name} #{help}\n# TYPE #{name} #{type}\n"
          workers.each { |worker| out << "#{name}{#{Statistics.worker_labels(worker)}} #{worker[key] || 0}\n" }
        end
        breaker_metrics(workers, out)
      end

      BREAKER_METRICS = {
        calls: ["counter", "weft_circuit_breaker_calls_total", "Calls that ended or were refused"],
        successes: ["counter", "weft_circuit_breaker_successes_total", "Calls that succeeded"],
        failures: ["counter", "weft_circuit_breaker_failures_total", "Calls that failed with an exception that counts"],
        slow: ["counter", "weft_circuit_breaker_slow_calls_total", "Calls slower than the breaker's slow_call"],
        starved: ["counter", "weft_circuit_breaker_starved_total",
                  "Calls late by the caller's doing (its reactor busy), not judged"],
        rejected: ["counter", "weft_circuit_breaker_rejected_total", "Calls refused without running"],
        opened: ["counter", "weft_circuit_breaker_opened_total", "Times the breaker opened"],
        admitted_fraction: ["gauge", "weft_circuit_breaker_admitted_fraction", "Share of calls the breaker admits now"]
      }.freeze

      private

      # Appends the circuit breakers' metrics (workers that report none add nothing); the state
      # is one 0/1 series per state, as Prometheus prefers to an enumeration coded as a number.
      def breaker_metrics(workers, out)
        series = workers.flat_map do |worker|
          Array(worker[:circuit_breakers]).map do |breaker|
            ["#{Statistics.worker_labels(worker)},breaker=\"#{Statistics.label(breaker[:name])}\"", breaker]
          end
        end
        return out if series.empty?

        out << "# HELP weft_circuit_breaker_state Whether the breaker is in this state\n# TYPE weft_circuit_breaker_state gauge\n"
        series.each do |labels, breaker|
          %w[closed open ramping].each do |state|
            out << "weft_circuit_breaker_state{#{labels},state=\"#{state}\"} #{breaker[:state].to_s == state ? 1 : 0}\n"
          end
        end
        BREAKER_METRICS.each do |key, (type, name, help)|
          out << "# HELP #{name} #{help}\n# TYPE #{name} #{type}\n"
          series.each { |labels, breaker| out << "#{name}{#{labels}} #{breaker[key] || 0}\n" }
        end
        out
      end

      # @return [String] a Prometheus label value, escaped
      def self.label(value)
        value.to_s.gsub(/[\\"\n]/, "\\" => "\\\\", "\"" => "\\\"", "\n" => "\\n")
      end

      # @return [String] the labels of a worker's series: worker and pid, and in a cluster the
      #   master generation (two workers of one index serve side by side during a hot restart)
      def self.worker_labels(worker)
        labels = "worker=\"#{worker[:worker]}\",pid=\"#{worker[:pid]}\""
        worker.key?(:master_generation) ? "#{labels},master_generation=\"#{worker[:master_generation]}\"" : labels
      end

      # Worker snapshots shared through small JSON files in a directory owned by the master
      # (`root`), one subdirectory per master generation: a hot restart's new master (the same
      # pid, exec'd) counts one more, and its workers serve beside the previous master's until
      # those have exited. A file per worker process (worker-<index>-<pid>.json), not per
      # index: during a hot restart two workers 0 serve, and during a phased restart a worker
      # and its replacement; before, each pair wrote one file, and /stats showed one or the
      # other. Every worker shows them all, each snapshot labelled with its
      # `master_generation`: any of them may answer /stats, and all of them serve. The master
      # removes a worker's file once it has reaped it (#remove).
      class Board
        # @return [String] the directory of one master generation's snapshots under `root`
        def self.directory(root, master_generation)
          File.join(root, "generation-#{master_generation}")
        end

        # Removes the snapshots of every master generation under `root` but `master_generation`.
        # @return [void]
        def self.remove_other_generations(root, master_generation)
          kept = directory(root, master_generation)
          Dir[File.join(root, "generation-*")].each { |dir| FileUtils.rm_rf(dir) unless dir == kept }
        end

        # Removes the snapshot of the worker process `pid` (exited), of whichever generation.
        # @return [void]
        def self.remove(root, pid)
          FileUtils.rm_f(Dir[File.join(root, "generation-*", "worker-*-#{pid}.json")])
        end

        # @param root [String] the master's directory
        # @param index [Integer] the worker's index
        # @param master_generation [Integer] hot restarts behind the worker's master
        # @param pid [Integer] the worker's process
        def initialize(root, index, master_generation: 0, pid: Process.pid)
          @root = root
          @master_generation = master_generation
          @path = File.join(Board.directory(root, master_generation), "worker-#{index}-#{pid}.json")
        end

        # Writes this worker's snapshot, labelled with its master generation (atomically: write
        # then rename).
        def publish(snapshot)
          temp = "#{@path}.tmp"
          File.write(temp, JSON.generate(snapshot.merge(master_generation: @master_generation)))
          File.rename(temp, @path)
        rescue SystemCallError
          nil
        end

        # @return [Array<Hash>] every worker's last snapshot, by master generation, index and start
        def read
          Dir[File.join(@root, "generation-*", "worker-*.json")].filter_map do |path|
            JSON.parse(File.read(path), symbolize_names: true)
          rescue SystemCallError, JSON::ParserError
            nil
          end.sort_by { |snapshot| [snapshot[:master_generation].to_i, snapshot[:worker].to_i, snapshot[:started_at].to_s] }
        end
      end
    end
  end
end
