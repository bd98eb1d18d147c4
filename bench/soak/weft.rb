# frozen_string_literal: true

# `weft serve -C bench/soak/weft.rb`: the soak test's server (bench/soak/run sets the
# environment). Two workers; each writes its numbers (SoakApp.snapshot) to
# SOAK_DIR/worker-INDEX.json every SOAK_SAMPLE seconds, for the runner to collect.
require "json"

rackup File.expand_path("app.ru", __dir__)
bind "tcp://127.0.0.1:#{ENV.fetch('SOAK_PORT')}"
workers 2
# Both workers get a share of wrk's keep-alive connections (with one shared socket the first
# worker to wake took nearly all of them in a trial run: 254k requests to 3k).
reuse_port true
stats_path "/stats"

worker_task do |server|
  dir = ENV.fetch("SOAK_DIR")
  every = Float(ENV.fetch("SOAK_SAMPLE", "10"))
  path = File.join(dir, "worker-#{server.worker_index}.json")
  loop do
    sleep every
    File.write("#{path}.tmp", JSON.generate(SoakApp.snapshot(server)))
    File.rename("#{path}.tmp", path) # whole files only: the runner reads while workers write
  end
end
