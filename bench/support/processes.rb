# frozen_string_literal: true

module Bench
  # The processes a benchmark starts and watches: a master's children, as Linux's /proc lists
  # them, and waits for what they do.
  module Processes
    module_function

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
