# frozen_string_literal: true

require_relative "lib/weft/version"

Gem::Specification.new do |spec|
  spec.name = "weft"
  spec.version = Weft::VERSION
  spec.summary = "Fiber-scheduler reactor, Rack server, pipelining PostgreSQL pool and HTTP client for I/O-bound Ruby apps"
  spec.description = <<~TEXT
    Weft runs ordinary blocking Ruby code (sockets, Net::HTTP, pg, sleep, Queue, Timeout,
    Process.wait) concurrently under Ruby's Fiber::Scheduler, and builds on that a Rack server
    with a fiber per request, a PostgreSQL pool that pipelines queries from many fibers, and a
    persistent HTTP client.
  TEXT
  spec.authors = ["Weft developers"]
  spec.license = "MIT"
  spec.required_ruby_version = ">= 3.1"

  spec.files = Dir["lib/**/*.rb", "ext/**/*.{c,h,rb}", "exe/*", "README.md", "docs/**/*.md"]
  spec.bindir = "exe"
  spec.executables = ["weft"]
  spec.require_paths = ["lib"]
  spec.extensions = Dir["ext/**/extconf.rb"]

  # The event-notification layer: epoll / io_uring / kqueue selectors made for Fiber::Scheduler.
  # 1.x releases up to the pin below still support Ruby 3.1.
  spec.add_dependency "io-event", "~> 1.7"
  spec.add_dependency "rack", ">= 2.2", "< 4"
  # pg is not a dependency: only Weft::Postgres needs it (`require "weft/postgres"` says so
  # when it is missing), and users of the core, server or HTTP client need not compile it.
end
