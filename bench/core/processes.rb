#!/usr/bin/env ruby
# frozen_string_literal: true

# How child processes overlap under Weft: 10 tasks each run a 0.5 s child process, one way per
# row (docs/core.md, "How the stdlib behaves under Weft" and "fork", quotes these figures).
# Sequential would take 5 s; full overlap takes 0.5 s plus process start-up.
#
#   bundle exec ruby bench/core/processes.rb
require_relative "../support/bundle"
require "open3"
require_relative "../../lib/weft"

def timed(label)
  started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
  results = Weft.run { Array.new(10) { Weft.spawn { yield } }.map(&:wait) }
  elapsed = Process.clock_gettime(Process::CLOCK_MONOTONIC) - started
  printf "%-40s %.2f s  %s\n", label, elapsed, results.uniq.inspect
end

timed("system('sleep 0.5')") { system("sleep 0.5") }
timed("backticks") { `sleep 0.5; echo ok`.chomp }
timed("IO.popen(command).read") { IO.popen(["sh", "-c", "sleep 0.5; echo ok"], &:read).chomp }
timed("Open3.capture2") { Open3.capture2("sh", "-c", "sleep 0.5; echo ok").first.chomp }
timed("spawn + Process.wait") { Process.wait(spawn("sleep 0.5")) && $?.success? }
timed("fork { sleep 0.5; exit! } + Process.wait") { Process.wait(fork { sleep 0.5; exit!(0) }) && $?.success? }
timed("fork { sleep 0.5 } + Process.wait") { Process.wait(fork { sleep 0.5 }) && $?.success? }
timed("IO.popen('-'), the child sleeps 0.5 s") { IO.popen("-") { |io| io ? io.read : (sleep 0.5; print "ok") } }
