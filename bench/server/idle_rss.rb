# frozen_string_literal: true

# The "idle keep-alive connections" row of bench/server.rb alone, for Weft only: RSS growth of
# a single-process `weft serve` while BENCH_IDLE (10,000) keep-alive connections sit idle, each
# after one request (bench/server/idle_client.rb). Optionally the same for other checkouts, each
# server run from its own tree, alternately ROUNDS (2) times:
#
#   bundle exec ruby bench/server/idle_rss.rb [OTHER_CHECKOUT...]
require_relative "../server"

checkouts = [ROOT, *ARGV].map { |dir| File.expand_path(dir) }
Process.setrlimit(:NOFILE, Process.getrlimit(:NOFILE)[1]) # inherited by server and client
ENV["RACK_ENV"] = "production"
rows = Integer(ENV.fetch("ROUNDS", "2")).times.flat_map do
  checkouts.map do |checkout|
    port = Bench.free_port
    command = [RbConfig.ruby, File.join(checkout, "exe/weft"), "serve", ServerBench::APP, "-o", "127.0.0.1", "-p", port.to_s, "-w", "0", "-q"]
    env = { "BUNDLE_GEMFILE" => WeftGemfile.for_ruby(checkout) } # its own lib/, not this one's
    pid = Process.spawn(env, *command, chdir: checkout, out: File::NULL, err: File::NULL, pgroup: true)
    begin
      ServerBench.wait_until_serving(port, pid)
      [checkout, ServerBench.idle_rss(port, pid)]
    ensure
      ServerBench.stop(pid)
    end
  end
end
puts "| checkout | held | RSS before MB | RSS after MB | growth MB | still serving |", "|---|---:|---:|---:|---:|---|"
rows.each do |checkout, row|
  puts format("| %s | %d | %.1f | %.1f | %.1f | %s |", checkout, row[:held], row[:before] / 1048576.0, row[:after] / 1048576.0,
              row[:delta_mb], row[:serving] ? "yes" : "no")
end
