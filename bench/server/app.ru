# frozen_string_literal: true

# The one app every server under test runs (bench/server.rb):
#   /         "Hello World"
#   /sleep    sleeps 10 ms (a stand-in for 10 ms of I/O)
#   /pg       `select pg_sleep(1)` on its own connection (PG_CONNINFO), like the seed's test
require "pg"


run lambda { |env|
  case env["PATH_INFO"]
  when "/"
    [200, { "content-type" => "text/plain" }, ["Hello World"]]
  when "/sleep"
    sleep 0.01
    [200, { "content-type" => "text/plain" }, ["slept 10 ms"]]
  when "/pg"
    connection = PG.connect(ENV.fetch("PG_CONNINFO"))
    begin
      connection.exec("select pg_sleep(1)")
    ensure
      connection.close
    end
    [200, { "content-type" => "text/plain" }, ["slept 1 s in PostgreSQL"]]
  else
    [404, { "content-type" => "text/plain" }, ["not found"]]
  end
}
