# frozen_string_literal: true

# How much does memory of its own, touched by each of N fibers taking turns, cost per turn? A
# probe for why a hello-world request costs the server more at 256 connections than at 50
# (bench/results/server-connections.md, "Where the 256-connection cost is not").
# Mimics the server's loop: a driver fiber transfers to each of N fibers in turn (io-event
# resuming each ready connection's fiber); each fiber reads `kib` KiB of its own String (its
# connection's objects), goes `depth` levels down through C frames (Array#each: what a request
# does to its machine and VM stacks) and transfers back. `stagger`: each fiber first goes
# fiber_index % 16 levels down before its loop, so that its working stack lines sit at other
# offsets within their pages than the other fibers' (with no stagger every fiber's are at the
# same offsets: the stacks are page-aligned and run the same code).
#
#   ruby bench/server/fiber_footprint.rb [turns]      (default 500,000 turns per figure)
require "etc"

def descend(depth)
  return 0 if depth.zero?
  [depth].each { |d| descend(d - 1) } # a block through a C method: C frames on the machine stack
  depth
end

def nest(levels, &body)
  return body.call if levels.zero?
  [levels].each { nest(levels - 1, &body) }
end

def ring(count, kib, depth, stagger, turns)
  driver = Fiber.current
  probe = "\x01".b
  fibers = Array.new(count) do |i|
    own = ("\x00".b * (kib * 1024)).b # index(probe) reads every line of it (memchr)
    Fiber.new do
      nest(stagger ? i % 16 : 0) do
        loop do
          own.index(probe) if kib.positive?
          descend(depth) if depth.positive?
          driver.transfer
        end
      end
    end
  end
  rounds = turns / count
  fibers.each(&:transfer) # warm
  GC.start
  GC.disable
  t0 = Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID)
  rounds.times { fibers.each(&:transfer) }
  elapsed = Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID) - t0
  GC.enable
  elapsed * 1e9 / (rounds * count)
end

turns = Integer(ARGV.fetch(0, "500000"))
puts "#{RUBY_DESCRIPTION}, #{Etc.nprocessors} CPUs, load #{File.read('/proc/loadavg').split.first(3).join(' ')}"
puts "| KiB own | C depth | stagger | ns per turn, 50 fibers | 256 fibers | 1024 fibers |"
puts "|---:|---:|---|---|---|---|"
[[0, 0], [2, 0], [0, 8], [2, 8]].each do |kib, depth|
  [false, true].each do |stagger|
    cells = [50, 256, 1024].map do |count|
      Array.new(3) { ring(count, kib, depth, stagger, turns) }.map { |r| format("%.0f", r) }.join(" / ")
    end
    puts format("| %d | %d | %s | %s |", kib, depth, stagger ? "yes" : "no", cells.join(" | "))
  end
end
puts "load #{File.read('/proc/loadavg').split.first(3).join(' ')}"
