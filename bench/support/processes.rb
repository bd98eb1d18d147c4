# frozen_string_literal: true

require "timeout"

module Bench
  # The processes a benchmark starts and watches: a master's children, as Linux's /proc lists
  # them, waits for what they do, stopping them, and the machine's CPU use beside them. Requires
  # nothing of the benchmarks (or of Weft): test/server/support/process_helpers.rb loads it too.
  module Processes
    module_function

    # Stops a process spawned in a process group of its own (`pgroup: true`), with everything
    # it started: TERM to the group, then KILL if it has not exited after `timeout` seconds.
    # @param pid [Integer, nil] the group's leader (nil: nothing to stop)
    # @param timeout [Numeric] seconds
    # @return [void]
    def stop(pid, timeout: 10)
      return unless pid
      Process.kill(:TERM, -pid)
      Timeout.timeout(timeout) { Process.wait(pid) }
    rescue Errno::ESRCH, Errno::ECHILD
      nil
    rescue Timeout::Error
      Process.kill(:KILL, -pid)
      Process.wait(pid)
    end

    # @return [Array(Integer, Integer)] jiffies the machine's CPUs have been busy, and in all,
    #   since boot (/proc/stat): the difference of two readings is the machine's load meanwhile
    def machine_cpu
      fields = File.foreach("/proc/stat").first.split.drop(1).first(8).map(&:to_i) # guest time is in user already
      idle = fields[3] + fields[4] # idle + iowait
      [fields.sum - idle, fields.sum]
    end

    # @param parent [Integer] a pid
    # @return [Array<Integer>] the children of `parent` still running (not zombies: exited,
    #   not yet reaped), in pid order
    def children(parent)
      Dir.glob("/proc/[0-9]*/stat").filter_map do |path|
        stat = File.read(path)
        # The command name (field 2) may hold spaces and parentheses; the fields after its
        # last ")" do not.
        state, ppid = stat[(stat.rindex(")") + 2)..].split(" ", 3)
        stat.to_i if ppid.to_i == parent && state != "Z"
      rescue SystemCallError
        nil # it ended meanwhile
      end.sort
    end

    # Calls the block every `interval` seconds until it returns a truthy value.
    # @param seconds [Numeric] how long to wait at most
    # @param what [String] what is awaited, for the error
    # @return [Object] the block's value
    # @raise [RuntimeError] when `seconds` pass first
    def wait_until(seconds, what, interval: 0.01)
      deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + seconds
      until (value = yield)
        raise "#{what}: not within #{seconds} s" if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
        sleep interval
      end
      value
    end
  end
end
