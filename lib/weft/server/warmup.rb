# frozen_string_literal: true

require "tmpdir"
require "fileutils"
require_relative "../server"

module Weft
  class Server
    # Runs sample requests through the server's own request path in the master, before the
    # first fork, so that what they run is compiled once, by the master's YJIT, and every worker
    # inherits the machine code with the rest of the master's memory instead of compiling it
    # again in its first seconds of serving.
    #
    # Why the master: YJIT compiles a method after it has been called 30 times (120 in an app
    # with more than 40,000 methods and blocks), in the process that calls it. A master that only
    # loads the app and forks never calls the request path, so each worker compiles all of it
    # from scratch, and a replacement worker (one killed, or a phased restart's) does it while it
    # serves. Code the master compiled before forking is in its executable memory, which a fork
    # shares copy-on-write like the heap: the worker runs it without compiling it again
    # (RubyVM::YJIT.runtime_stats: a worker of a warmed master starts with the master's
    # compiled_iseq_count; over its first 200 requests it compiled 12-15 methods and blocks where
    # a cold one compiled 66, bench/server/warmup.rb).
    #
    # The requests are real: a Server on a private unix socket, with the app and the settings of
    # the cluster (not its hooks, binds, access log or pidfile), serves them on Weft's C parser,
    # fast path, Rack adapter and response writer in a reactor of their own, and Weft's own HTTP
    # client sends them (so its path is warm too: an app that calls other services with it gains
    # there as well). Each request runs `rounds` times, every eighth on a new connection, so
    # that the accept and first-request paths run too. The reactor, the server and the socket are
    # gone before the first fork.
    #
    #   # config/weft.rb
    #   preload true
    #   warmup do |warm|
    #     warm.get("/health")
    #     warm.post("/search", body: '{"q": "x"}', headers: { "content-type" => "application/json" })
    #   end
    #
    # A warm-up is the app's choice of requests: ones that touch no database or other service
    # (no state of the master's may leak into the workers: a connection opened here would be
    # shared by every worker) and change nothing. One that raises, or a response that is not
    # what it expects, is logged and the boot goes on; so does one that takes longer than
    # TIMEOUT, which is cut short.
    class Warmup
      # Sends per request: past YJIT's call threshold for a large app (120), with room for a method
      # called once per request to be compiled and then run compiled.
      ROUNDS = 150
      # Every this many sends, a new connection.
      CONNECTION_EVERY = 8
      # Seconds for all the warm-up blocks together.
      TIMEOUT = 30
      # Seconds a request still in the app when the blocks are done (cut short) gets to finish.
      SHUTDOWN_TIMEOUT = 1
      # Settings the warm-up server does not take from the cluster's: what runs beside the
      # request path (hooks), where and how it listens, what it writes out.
      LEFT_OUT = (Config::HOOKS + %i[binds access_log pidfile control_dir reuse_port app rackup workers preload]).freeze

      # A response, read whole.
      Response = Struct.new(:status, :headers, :body)

      class << self
        # Runs the config's warmup blocks against `app`, when there are any and the process has
        # a reason to: a cluster's master about to fork. Logs what it did (with YJIT: what was
        # compiled, and how long that took) and every failure; never raises.
        # @param app [#call] the Rack app the workers will serve
        # @param config [Config]
        # @param timeout [Numeric] seconds for all the blocks: past it, the one running is
        #   interrupted where it waits (a block that never waits cannot be)
        # @return [Hash, nil] :requests sent, :failures, :seconds, :yjit (compiled iseqs and
        #   compile ms, when YJIT is on); nil when there was nothing to run
        def run(app, config, log: Weft.logger, timeout: TIMEOUT)
          blocks = config[:warmup]
          return if blocks.empty?
          before = yjit_counts
          threads = Thread.list
          sockets = open_sockets
          started = Timers.now
          warm = nil
          failures = 0
          limit = started + timeout
          in_reactor(app, config, log) do |socket|
            warm = new(socket, log: log)
            Weft.timeout(timeout, "the warm-up took longer than #{timeout} s") do
              blocks.each do |block|
                block.call(warm)
              rescue StandardError, ScriptError => e
                # The timeout above is a StandardError too: past it, no block runs any more.
                raise if e.is_a?(Weft::TimeoutError) && Timers.now >= limit
                failures += 1
                log.error("warmup failed (the workers will start cold where it did not reach): " \
                          "#{e.class}: #{e.message}\n\t#{(e.backtrace || []).first(8).join("\n\t")}")
              end
            end
          rescue Weft::TimeoutError => e
            failures += 1
            log.error("warmup cut short: #{e.message}")
          ensure
            warm&.close
          end
          warn_left_open(Thread.list - threads, open_sockets - sockets, log)
          report(warm, failures, Timers.now - started, before, log)
        rescue StandardError => e
          log.error("warmup could not run: #{e.class}: #{e.message}")
          nil
        end

        # @return [Array(Integer, Integer), nil] YJIT's compiled iseqs and compile time (ns) so
        #   far in this process, nil without YJIT (Ruby before 3.3 has no compile time counter)
        def yjit_counts
          return unless defined?(RubyVM::YJIT) && RubyVM::YJIT.enabled?
          stats = RubyVM::YJIT.runtime_stats
          stats && stats.values_at(:compiled_iseq_count, :compile_time_ns).map(&:to_i)
        end

        private

        # Serves `app` on a private unix socket in a reactor of its own while the block runs
        # (given the socket's path), then stops the server and removes the socket.
        def in_reactor(app, config, log)
          dir = Dir.mktmpdir("weft-warmup")
          socket = File.join(dir, "warmup.sock")
          options = config.options.reject { |key, _| LEFT_OUT.include?(key) }
          server = Server.new(app, Config.new(options.merge(binds: ["unix://#{socket}"], quiet: true,
                                                            shutdown_timeout: SHUTDOWN_TIMEOUT)))
          Weft.run do
            # Weft.run joins a reactor already running here (a cluster started inside one):
            # its tasks are not the warm-up's to cancel.
            before = Weft.scheduler.live_tasks
            serving = Weft.spawn(name: "weft warmup server") { server.run }
            begin
              yield socket
            ensure
              server.stop
              serving.wait
              cancel_leftovers(Weft.scheduler.live_tasks - before - [Task.current], log)
            end
          end
        ensure
          FileUtils.rm_rf(dir) if dir
        end

        # Tasks the app started during the warm-up and left running (a background loop its first
        # request began, say) would keep this reactor, and the master's boot, waiting for ever:
        # they are cancelled, given SHUTDOWN_TIMEOUT to run their ensure blocks, and named in the
        # log. The workers start their own.
        def cancel_leftovers(leftovers, log)
          return if leftovers.empty?
          names = leftovers.map { |task| task.name || "unnamed" }.tally.map { |name, n| n > 1 ? "#{name} x#{n}" : name }
          log.warn("warmup: cancelled #{leftovers.size} task#{'s' unless leftovers.size == 1} the app left running (#{names.join(', ')})")
          leftovers.each(&:cancel)
          Weft.timeout(SHUTDOWN_TIMEOUT) do
            leftovers.each do |task|
              task.wait
            rescue StandardError
              nil # a task that failed as it was cancelled has ended all the same
            end
          end
        rescue Weft::TimeoutError
          nil # they had their chance; Weft.run cancels what is left as it unwinds
        end

        # What the warm-up opened and left open stays in the master, where nothing uses it: a
        # socket (a database or cache connection) is inherited by every worker, which then share
        # it (their traffic mixed on one connection); a thread goes on in the master alone (a
        # fork copies only the thread that forks), the workers having a dead copy of it. Neither
        # can be closed from here without knowing what it is: both are named in the log, with
        # the way out (close it in the block, or in `before_fork`, which runs after the warm-up).
        def warn_left_open(threads, sockets, log)
          # The warm-up server's stall detector ends by itself, within its tick.
          threads = threads.select(&:alive?).reject { |thread| thread.name&.start_with?("weft ") && thread.join(1) }
          unless threads.empty?
            log.warn("warmup: #{threads.size} thread#{'s' unless threads.size == 1} started during the warm-up still " \
                     "running in the master, not in the workers (#{threads.map { |thread| thread.name || 'unnamed' }.join(', ')})")
          end
          return if sockets.empty?
          log.warn("warmup: #{sockets.size} socket#{'s' unless sockets.size == 1} opened during the warm-up still open " \
                   "(fd #{sockets.map(&:first).join(', ')}): every worker would share #{sockets.size == 1 ? 'it' : 'them'}; " \
                   "close #{sockets.size == 1 ? 'it' : 'them'} in the warmup block or in before_fork")
        end

        # @return [Array<Array(String, String)>] this process's open sockets, as fd number and
        #   link ("socket:[123]"); none where there is no /proc
        def open_sockets
          Dir.children("/proc/self/fd").filter_map do |fd|
            link = File.readlink("/proc/self/fd/#{fd}")
            [fd, link] if link.start_with?("socket:")
          rescue SystemCallError
            nil # the fd Dir.children itself read the folder with, closed since
          end.sort_by { |fd, _| fd.to_i }
        rescue SystemCallError
          []
        end

        def report(warm, failures, seconds, before, log)
          after = yjit_counts
          yjit = after && before && { iseqs: after[0] - before[0], compile_ms: (after[1] - before[1]) / 1e6 }
          sent = warm ? warm.sent : 0
          compiled = yjit ? format("; YJIT compiled %d methods and blocks in %.0f ms", yjit[:iseqs], yjit[:compile_ms]) : ""
          log.info(format("warmup: %d requests in %.0f ms%s%s", sent, seconds * 1000, compiled,
                          failures.positive? ? "; #{failures} failed (logged above)" : ""))
          { requests: sent, failures: failures, seconds: seconds, yjit: yjit }
        end
      end

      # @return [Integer] requests sent so far
      attr_reader :sent

      # @param socket [String] the warm-up server's unix socket
      def initialize(socket, log: Weft.logger)
        require_relative "../http"
        @client = HTTP::Client.new("unix://#{socket}", proxy: nil, limit: 1, read_timeout: 10, deadline: 10, decompress: false)
        @log = log
        @sent = 0
      end

      # Sends the request `rounds` times through the server's request path and the app.
      # @param method [String, Symbol] "GET", :post...
      # @param path [String] the request target, e.g. "/items?page=2"
      # @param headers [Hash{String => String}]
      # @param body [String, nil]
      # @param rounds [Integer] how many times (ROUNDS: enough for YJIT to compile what it runs)
      # @return [Response] the last response, to check when it matters (a warm-up that answers
      #   404 warmed the 404 path)
      def request(method, path, headers: {}, body: nil, rounds: ROUNDS)
        raise ArgumentError, "rounds must be at least 1" unless rounds.is_a?(Integer) && rounds.positive?
        verb = method.to_s.upcase
        response = nil
        rounds.times do
          @client.close_idle if (@sent % CONNECTION_EVERY).zero?
          @sent += 1
          answer = @client.request(verb, path, headers: headers, body: body)
          response = Response.new(answer.status, answer.headers, answer.body)
        end
        response
      end

      # #request with GET. @return [Response]
      def get(path, headers: {}, rounds: ROUNDS)
        request("GET", path, headers: headers, rounds: rounds)
      end

      # #request with POST. @return [Response]
      def post(path, body:, headers: {}, rounds: ROUNDS)
        request("POST", path, headers: headers, body: body, rounds: rounds)
      end

      # Closes the client's connections. @return [void]
      def close
        @client.close
      end
    end
  end
end
