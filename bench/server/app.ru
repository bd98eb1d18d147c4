# frozen_string_literal: true

# The one app every server under test runs (bench/server.rb):
#   /         "Hello World"
#   /sleep    sleeps 10 ms (a stand-in for 10 ms of I/O)
#   /pg       `select pg_sleep(1)` like the seed's test, on a connection from a small pool of
#             10 plain `pg` connections (PG_CONNINFO), so that the figure measures overlap
#             rather than connection setup. The pool is a Queue, which blocks a thread under
#             Puma and only a fiber under Weft and Falcon. It is opened in the serving process
#             by /pg/warm (the bench calls it before measuring).
require "pg"

PG_POOL = Queue.new
PG_POOL_LOCK = Mutex.new
PG_POOL_SIZE = 10

def pg_warm
  PG_POOL_LOCK.synchronize do
    (PG_POOL_SIZE - PG_POOL.size).times { PG_POOL << PG.connect(ENV.fetch("PG_CONNINFO")) } if PG_POOL.empty?
  end
end

run lambda { |env|
  case env["PATH_INFO"]
  when "/"
    [200, { "content-type" => "text/plain" }, ["Hello World"]]
  when "/sleep"
    sleep 0.01
    [200, { "content-type" => "text/plain" }, ["slept 10 ms"]]
  when "/pg/warm"
    pg_warm
    [200, { "content-type" => "text/plain" }, ["#{PG_POOL.size} connections"]]
  when "/pg"
    connection = PG_POOL.pop
    begin
      connection.exec("select pg_sleep(1)")
    ensure
      PG_POOL << connection
    end
    [200, { "content-type" => "text/plain" }, ["slept 1 s in PostgreSQL"]]
  else
    [404, { "content-type" => "text/plain" }, ["not found"]]
  end
}
