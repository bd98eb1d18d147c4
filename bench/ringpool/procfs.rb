# frozen_string_literal: true

require "etc"

module RingpoolBench
  # CPU time from /proc of a process tree (ringpool's master and its shards, PostgreSQL's
  # postmaster and its backends, JMeter's JVM). The whole machine's: Bench::Processes.machine_cpu.
  module Procfs
    HZ = Etc.sysconf(Etc::SC_CLK_TCK).to_f

    module_function

    # @return [Hash{Integer=>Array(Integer, Integer, Integer)}] per live process: parent pid,
    #   its own CPU ticks (user + system), and its reaped children's (cutime + cstime)
    def processes
      Dir.glob("/proc/[0-9]*/stat").each_with_object({}) do |path, table|
        # The command name (field 2) may hold spaces; the fields after its ")" do not.
        fields = File.read(path).split(") ").last.split
        table[Integer(path[%r{\A/proc/(\d+)/}, 1])] = [fields[1].to_i, fields[11].to_i + fields[12].to_i,
                                                       fields[13].to_i + fields[14].to_i]
      rescue SystemCallError
        next # the process ended meanwhile
      end
    end

    # CPU seconds used so far by `root` and every process under it, including processes that
    # have ended (their time moves into their parent's reaped-children counters).
    # @param table [Hash] from {processes}
    # @return [Float]
    def tree_cpu(table, root)
      return 0.0 unless table.key?(root)

      children = Hash.new { |hash, pid| hash[pid] = [] }
      table.each { |pid, (ppid, _, _)| children[ppid] << pid }
      ticks = 0
      pending = [root]
      while (pid = pending.pop)
        _, own, reaped = table.fetch(pid)
        ticks += own + reaped
        pending.concat(children[pid])
      end
      ticks / HZ
    end
  end
end
