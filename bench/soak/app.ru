# frozen_string_literal: true

# The app the soak test (bench/soak/run) serves under `weft serve -C bench/soak/weft.rb`: each
# endpoint exercises one way a request uses Weft's PostgreSQL pool and HTTP client, including
# the ways they fail. Reads SOAK_DATABASE_URL and SOAK_UPSTREAM (set by the runner).
require "json"
require "weft/http"
require "weft/postgres"

module SoakApp
  # Loaded in each worker (no preload), so each has its own pools, and its PostgreSQL
  # backends carry its pid (pg_stat_activity.application_name).
  DB = Weft::Postgres::Pool.new(ENV.fetch("SOAK_DATABASE_URL"), limit: 4, application_name: "soak-#{Process.pid}")
  API = Weft::HTTP::Client.new(ENV.fetch("SOAK_UPSTREAM"), deadline: 2)
  CHUNK = ("x" * 65_536).freeze
  # Failures answered, by class: the snapshot reports them (one reactor per worker, so no lock).
  FAILURES = Hash.new(0)

  module_function

  def text(status, body)
    [status, { "content-type" => "text/plain" }, [body]]
  end

  # A failure the endpoint means to provoke, answered with its class so the runner can count it.
  def failed(status, error)
    FAILURES[error.class.name] += 1
    text(status, error.class.name)
  end

  ROUTES = {
    "/db" => -> { text(200, DB.query("select $1::int + 1", rand(1000)).getvalue(0, 0)) },
    "/tx" => lambda {
      id = rand(1..100)
      n = DB.transaction do |conn|
        conn.exec_params("update soak_counters set n = n + 1 where id = $1", [id])
        conn.exec_params("select n from soak_counters where id = $1", [id]).getvalue(0, 0)
      end
      text(200, n)
    },
    # A statement past its deadline: the pool must cancel it and keep the connection usable.
    "/db_deadline" => lambda {
      Weft.deadline(0.02) { DB.query("select pg_sleep(0.2)") }
      text(200, "in time")
    },
    # SQL errors outside and inside a transaction, in turn.
    "/db_error" => lambda {
      if rand < 0.5
        DB.query("select 1 / 0")
      else
        DB.transaction { |conn| conn.exec("select 1 / 0") }
      end
    },
    "/up" => -> { text(200, API.get("/x").body) },
    # The upstream's /slow answers after 0.3 s, past this deadline.
    "/up_deadline" => lambda {
      Weft.deadline(0.1) { API.get("/slow") }
      text(200, "in time")
    },
    # PostgreSQL and the upstream at once, under one deadline.
    "/mix" => lambda {
      Weft.deadline(1) do
        db = Weft.spawn { DB.query("select count(*) from soak_counters").getvalue(0, 0) }
        up = Weft.spawn { API.get("/mix").status }
        text(200, "#{db.wait} #{up.wait}")
      end
    },
    "/stream" => lambda {
      [200, { "content-type" => "text/plain" }, Enumerator.new { |out| 16.times { |i| sleep 0.005; out << "part #{i}\n" } }]
    },
    # 2 MB, streamed in 64 KB pieces: slow readers (curl --limit-rate) hold it for a while.
    "/big" => -> { [200, { "content-type" => "text/plain" }, Enumerator.new { |out| 32.times { out << CHUNK } }] },
    # /echo: bench/soak/clients.rb's uploads.
    "/upload" => lambda { |env|
      size = 0
      buffer = String.new
      size += buffer.bytesize while env["rack.input"].read(65_536, buffer)
      text(200, size.to_s)
    }
  }.tap { |routes| routes["/echo"] = routes["/upload"] }.freeze

  def call(env)
    route = ROUTES[env["PATH_INFO"]] or return text(404, "not found")
    route.arity == 1 ? route.call(env) : route.call
  rescue Weft::DeadlineExceeded => e
    failed(504, e)
  rescue Weft::HTTP::Error, Weft::Error, PG::Error => e
    failed(502, e)
  end

  # This worker's numbers, after a full GC so that live objects and RSS show what it keeps
  # rather than where the garbage sawtooth happens to be. Written by the worker_task in
  # bench/soak/weft.rb every sample interval.
  def snapshot(server)
    GC.start
    fds = Dir.children("/proc/self/fd").map do |fd|
      File.readlink("/proc/self/fd/#{fd}")[/\A(socket|pipe|anon_inode:\[?[a-z]+|\/dev|\/tmp|\/)/, 1] || "other"
    rescue SystemCallError
      "gone" # the listing's own descriptor
    end
    classes = Hash.new(0)
    ObjectSpace.each_object(Object) { |object| classes[Kernel.instance_method(:class).bind_call(object).to_s] += 1 }
    {
      pid: Process.pid, worker: server.worker_index, at: Time.now.to_f,
      rss_kb: File.read("/proc/self/status")[/^VmRSS:\s+(\d+)/, 1].to_i,
      fds: fds.size - 1, fd_kinds: fds.tally,
      live_slots: GC.stat(:heap_live_slots),
      server: server.statistics.snapshot.slice(:requests, :in_flight, :connections_open, :connections_idle),
      scheduler: Weft.scheduler.statistics.slice(:tasks, :timers, :coarse_waiters, :idle_fibers),
      db: DB.statistics, upstream: API.statistics.values.first || {},
      failures: FAILURES, classes: classes
    }
  end
end

run SoakApp
