# frozen_string_literal: true

# One upstream shard of bench/resilience/fault, run under `weft serve -w 0` on a unix socket.
#
#   GET  /          answers "ok" after FAULT_SHARD_LATENCY seconds (default 0.001), or after
#                   the fault's delay when the request arrives inside the fault window
#   POST /fault?from=T&until=T&delay=S
#                   sets the fault window (wall-clock epoch seconds, so the driver can place it
#                   on the load's timeline before the load starts) and the delay inside it
#   GET  /arrivals  JSON {second => requests received}, by wall-clock second: what the shard
#                   actually saw, to check the fan-out's own account of what it admitted
#
# A slow answer is a fiber asleep, so the shard keeps accepting while it stalls; the fan-out
# gives up on it at its deadline and closes the connection, and the late answer then meets a
# closed socket, which the server shrugs off.
require "json"
require "rack/utils"

LATENCY = Float(ENV.fetch("FAULT_SHARD_LATENCY", "0.001"))

fault = { from: Float::INFINITY, until: Float::INFINITY, delay: 0.0 }
arrivals = Hash.new(0)

run lambda { |env|
  now = Process.clock_gettime(Process::CLOCK_REALTIME)
  case [env["REQUEST_METHOD"], env["PATH_INFO"]]
  when ["GET", "/"]
    arrivals[now.floor] += 1
    sleep(now >= fault[:from] && now < fault[:until] ? fault[:delay] : LATENCY)
    [200, { "content-type" => "text/plain" }, ["ok"]]
  when ["POST", "/fault"]
    params = Rack::Utils.parse_query(env["QUERY_STRING"])
    fault = { from: Float(params.fetch("from")), until: Float(params.fetch("until")), delay: Float(params.fetch("delay")) }
    [204, {}, []]
  when ["GET", "/arrivals"]
    [200, { "content-type" => "application/json" }, [JSON.generate(arrivals)]]
  else
    [404, { "content-type" => "text/plain" }, ["not found"]]
  end
}
