# frozen_string_literal: true

# User and system CPU time per hello-world request, Weft beside the peers of bench/server.rb,
# at 50 and 256 connections: where each server's cost per request goes (its own code, or the
# kernel's socket work), and how each grows with the connections.
#
#   bundle exec ruby bench/server/cpu_split.rb [SERVER...]     (default: weft "iodine -t 1")
#       ROUNDS=3, BENCH_DURATION=5 seconds per wrk run
#
# The servers run at once, as in bench/server.rb (idle while another is measured), taking turns.
# Each figure is the CPU time of the server's process tree (its threads, and its children:
# Iodine's worker) from /proc/PID/stat before and after one `wrk -t1` run, per request. Unlike
# requests/s it tells the server's own cost from the load's, but the machine's load still
# inflates it (cache and CPU sharing): compare servers within a round.
require_relative "../server"
require "etc"

module CPUSplit
  TICK = Etc.sysconf(Etc::SC_CLK_TCK).to_f
  ROUNDS = Integer(ENV.fetch("ROUNDS", "3"))

  module_function

  def run(names)
    puts "#{RUBY_DESCRIPTION}; load at start #{load_average}"
    puts "| round | server | connections | requests/s | user µs | system µs | total µs | load |"
    puts "|---:|---|---:|---:|---:|---:|---:|---:|"
    ENV["RACK_ENV"] = "production"
    ServerBench.with_servers(names) do |running|
      running.each_value { |port, _| wrk(port, 256, 2) } # warm-up
      ROUNDS.times do |round|
        running.each do |name, (port, pid)|
          [50, 256].each { |connections| puts row(round + 1, name, port, pid, connections) }
        end
      end
    end
    puts "load at end #{load_average}"
  end

  def row(round, name, port, pid, connections)
    pids = process_tree(pid)
    user, system = cpu_ticks(pids)
    requests, seconds = wrk(port, connections, ServerBench::DURATION)
    user2, system2 = cpu_ticks(pids)
    per = ->(ticks) { ticks / TICK * 1e6 / requests }
    format("| %d | %s | %d | %.0f | %.2f | %.2f | %.2f | %s |", round, name, connections, requests / seconds,
           per.call(user2 - user), per.call(system2 - system), per.call(user2 - user + system2 - system), load_average)
  end

  # @return [Array(Integer, Float)] requests answered and the seconds wrk took
  def wrk(port, connections, seconds)
    output = IO.popen(["wrk", "-t1", "-c#{connections}", "-d#{seconds}s", "http://127.0.0.1:#{port}/"], &:read)
    requests, elapsed = output.match(/(\d+) requests in ([\d.]+)s/).captures
    [Integer(requests), Float(elapsed)]
  end

  # @return [Array<Integer>] pid and its descendants
  def process_tree(pid)
    children = Dir["/proc/#{pid}/task/*/children"].flat_map { |file| File.read(file).split.map(&:to_i) }
    [pid, *children.flat_map { |child| process_tree(child) }]
  end

  # @return [Array(Integer, Integer)] user and system clock ticks of the processes together
  def cpu_ticks(pids)
    pids.map do |pid|
      fields = File.read("/proc/#{pid}/stat").sub(/\A.*\) /m, "").split
      [fields[11].to_i, fields[12].to_i] # utime and stime, stat(5) fields 14 and 15
    end.transpose.map(&:sum)
  end

  def load_average
    File.read("/proc/loadavg").split.first
  end
end

CPUSplit.run(ARGV.empty? ? ["weft", "iodine -t 1"] : ARGV) if $PROGRAM_NAME == __FILE__
