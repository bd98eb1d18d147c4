# frozen_string_literal: true

# Runs each seed post's experiment on this machine, with Weft and with the time's successors
# side by side, and writes bench/results/seeds.md. Start it with bench/seeds/run (which
# installs wrk when it is missing).
#
#   bench/seeds/run [--only 001,002,003,004] [--seconds N]
#
# --seconds: how long each wrk measurement of seeds 001 and 004 lasts (default 10). SEED_002_N
# and SEED_002_C narrow seed 002's table (default "5,10,20,50,100" and "10,100,1000").
require "optparse"
require_relative "../http_client/support"
require_relative "../postgres/support"
require_relative "../postgres/http_bench"
require_relative "../support/report"
require_relative "../support/results"
require_relative "seed_001"
require_relative "seed_002"
require_relative "seed_003"
require_relative "seed_004"

only = %w[001 002 003 004]
seconds = 10
OptionParser.new do |options|
  options.on("--only LIST", Array) { |list| only = list }
  options.on("--seconds N", Integer) { |n| seconds = n }
end.parse!
unknown = only - %w[001 002 003 004]
abort "unknown seed(s) #{unknown.join(', ')}: choose among 001, 002, 003, 004" unless unknown.empty?

command = "bench/seeds/run#{" --only #{only.join(',')}" unless only.size == 4}#{" --seconds #{seconds}" unless seconds == 10}"
report = Bench::Report.new("The seeds' experiments, rerun", command: command)
report.paragraph(<<~TEXT)
  Each section quotes what a seed (one of the posts and the talk Weft started from, kept beside
  the project, not in its repository) claimed, then runs the same experiment on this machine as
  faithfully as one machine allows, naming every substitution. Everything — servers, upstreams,
  PostgreSQL (a private throwaway cluster) and the load tools (wrk, hey, curl) — shares this
  machine's cores: read the ratios, not the absolute figures. Load average when the run started: #{File.read('/proc/loadavg').split.first(3).join(' ')}.
  Servers: #{Bench.versions}; PostgreSQL #{only.include?('002') ? PostgresBench.server_version : 'not used'}.
  #{Bench::Results.sibling_link('seeds')}
TEXT

# Each seed runs in turn, so one's servers never compete with another's.
Seeds::Seed001.report(report, Seeds::Seed001.run(seconds)) if only.include?("001")
Seeds::Seed002.report(report, Seeds::Seed002.run) if only.include?("002")
Seeds::Seed003.report(report) if only.include?("003")
Seeds::Seed004.report(report, Seeds::Seed004.run(seconds)) if only.include?("004")

path = Bench::Results.path("seeds")
report.write(path)
warn "wrote #{path}"
