# frozen_string_literal: true

# Loaded by every test file (`require "test_helper"`). Sets up the load path, Minitest, the
# library under test, the helpers in test/support/, and a per-test watchdog.

root = File.expand_path("..", __dir__)
[File.join(root, "lib"), File.join(root, "test")].each do |dir|
  $LOAD_PATH.unshift(dir) unless $LOAD_PATH.include?(dir)
end

require "minitest/autorun"
require "socket"
require "stringio"

require "weft" if File.exist?(File.join(root, "lib", "weft.rb"))

Dir[File.join(__dir__, "support", "*.rb")].sort.each { |file| require file }

module Weft
  module Test
    # Fails any single test (setup + test + teardown) that runs longer than its limit, so a
    # deadlock shows up as one failed test instead of a suite that never ends.
    #
    # A separate watchdog thread keeps the deadline of every running test. When one passes it
    # prints the backtrace of every thread to stderr and raises Watchdog::Timeout in the test's
    # thread. Thread#raise interrupts sleep, IO waits, Queue#pop, Mutex, Process.wait, and it
    # also reaches code running under a Fiber scheduler (the exception comes up in whatever fiber
    # the thread is running, usually the scheduler's event loop). Timeout is an Exception, not a
    # StandardError, so `rescue => e` in the code under test does not swallow it.
    #
    # If the test still has not finished GRACE seconds later (the thread is stuck where
    # interrupts are not checked, or the exception was swallowed), the watchdog prints the
    # backtraces again, stops test PostgreSQL clusters and ends the process with exit!(1).
    #
    # Limit: 60 s, or WEFT_TEST_TIMEOUT (seconds, 0 disables), or per class by overriding
    # `watchdog_timeout`. Grace: WEFT_TEST_WATCHDOG_GRACE (default 15 s).
    module Watchdog
      class Timeout < Exception # rubocop:disable Lint/InheritException
      end

      Entry = Struct.new(:thread, :name, :limit, :deadline, :raised)

      @mutex = Mutex.new
      @cond = ConditionVariable.new
      @entries = {}
      @thread = nil
      @abort_hooks = []

      class << self
        def grace
          Float(ENV.fetch("WEFT_TEST_WATCHDOG_GRACE", "15"))
        end

        # Called before the process is killed by the watchdog (exit! skips at_exit).
        def on_abort(&block)
          @abort_hooks << block
        end

        # Runs the block (a whole Minitest::Test#run) under the watchdog.
        def guard(test, limit)
          return yield if limit.nil? || limit <= 0

          Thread.handle_interrupt(Timeout => :never) do
            entry = arm(Thread.current, "#{test.class}##{test.name}", limit)
            begin
              Thread.handle_interrupt(Timeout => :immediate) { yield }
            rescue Timeout => e
              # Arrived outside Minitest's own capture (e.g. in its timing code): record it.
              test.failures << Minitest::UnexpectedError.new(e)
              Minitest::Result.from(test)
            ensure
              disarm(entry)
              drain_late_timeout
            end
          end
        end

        private

        def arm(thread, name, limit)
          entry = Entry.new(thread, name, limit, now + limit, false)
          @mutex.synchronize do
            @entries[entry.object_id] = entry
            start_thread
            @cond.signal
          end
          entry
        end

        def disarm(entry)
          @mutex.synchronize { @entries.delete(entry.object_id) }
        end

        # A Timeout raised just after the test finished but before disarm is pending (masked);
        # let it fire here and drop it: the test did finish.
        def drain_late_timeout
          Thread.handle_interrupt(Timeout => :immediate) { Thread.pass }
        rescue Timeout
          nil
        end

        def now
          Process.clock_gettime(Process::CLOCK_MONOTONIC)
        end

        def start_thread
          return if @thread&.alive?

          @thread = Thread.new { watch }
          @thread.name = "weft-test-watchdog"
          @thread.report_on_exception = true
        end

        def watch
          @mutex.synchronize do
            loop do
              t = now
              @entries.each_value do |entry|
                next if entry.deadline > t

                entry.raised ? give_up(entry) : interrupt(entry)
              end
              next_deadline = @entries.each_value.map(&:deadline).min
              @cond.wait(@mutex, next_deadline ? [next_deadline - now, 0.01].max : nil)
            end
          end
        end

        def interrupt(entry)
          entry.raised = true
          entry.deadline = now + grace
          message = "#{entry.name} ran longer than #{entry.limit}s (test watchdog; " \
                    "set WEFT_TEST_TIMEOUT or override #watchdog_timeout to change the limit)"
          dump_threads("TEST WATCHDOG: #{message}")
          entry.thread.raise(Timeout, message)
        end

        def give_up(entry)
          dump_threads("TEST WATCHDOG: #{entry.name} is still running #{grace}s after it was " \
                       "interrupted; aborting the test process")
          @abort_hooks.each do |hook|
            hook.call
          rescue Exception => e # rubocop:disable Lint/RescueException
            warn "test watchdog: abort hook failed: #{e.class}: #{e.message}"
          end
          $stderr.flush
          exit!(1)
        end

        def dump_threads(headline)
          out = +"\n#{'=' * 78}\n#{headline}\n"
          Thread.list.each do |thread|
            next if thread == Thread.current

            out << "--- #{thread.inspect}\n"
            (thread.backtrace || ["(no backtrace)"]).first(40).each { |line| out << "    #{line}\n" }
          end
          out << "#{'=' * 78}\n"
          $stderr.write(out)
          $stderr.flush
        end
      end

      # Prepended to Minitest::Test.
      module Hook
        def run
          Watchdog.guard(self, watchdog_timeout) { super }
        end
      end
    end

    # Helpers available in every test.
    module Helpers
      # Seconds a single test may take before the watchdog fails it. Override per class.
      def watchdog_timeout
        Float(ENV.fetch("WEFT_TEST_TIMEOUT", "60"))
      end

      # Runs the block, fails if it took `seconds` or more, returns the block's value.
      def assert_elapsed_under(seconds, message = nil)
        started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
        value = yield
        elapsed = Process.clock_gettime(Process::CLOCK_MONOTONIC) - started
        assert elapsed < seconds, lambda {
          [message, format("expected the block to take under %.3fs, it took %.3fs", seconds, elapsed)]
            .compact.join(": ")
        }
        value
      end

      # Seconds this thread has waited for a core since `reading` (a
      # Weft::ThreadStatistics.calling_thread taken earlier): the machine's load as the thread
      # felt it, for tests that tell that from a defect of their own when something came late.
      # @return [Float, nil] nil where Linux keeps no such statistics
      def core_wait_since(reading)
        now = Weft::ThreadStatistics.calling_thread
        now[1] - reading[1] if reading && now
      end

      # Runs the block and returns [its value or the exception it raised, seconds it took], for
      # tests that assert both what happened and when.
      def timed
        started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
        outcome = begin
          yield
        rescue Exception => e # rubocop:disable Lint/RescueException
          e
        end
        [outcome, Process.clock_gettime(Process::CLOCK_MONOTONIC) - started]
      end

      # @return [String] what Weft.logger logged while the block ran
      def capture_log
        log = StringIO.new
        previous = Weft.logger
        Weft.logger = Logger.new(log)
        yield
        log.string
      ensure
        Weft.logger = previous
      end

      # A TCP port on 127.0.0.1 that was free a moment ago (the OS picked it).
      def free_tcp_port
        Weft::Test.free_tcp_port
      end

      # The process-wide throwaway PostgreSQL cluster, started on first use.
      def postgres
        Weft::Test::PostgresCluster.shared
      end
    end

    def self.free_tcp_port(host = "127.0.0.1")
      server = TCPServer.new(host, 0)
      server.addr[1]
    ensure
      server&.close
    end
  end
end

Minitest::Test.prepend(Weft::Test::Watchdog::Hook)
Minitest::Test.include(Weft::Test::Helpers)
