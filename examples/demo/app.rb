# frozen_string_literal: true

require "json"
require "net/http"
require "weft"

# Weft's demo app: plain blocking Ruby in every endpoint, overlapped by the server.
#
#   /                      hello
#   /sleep?seconds=1       sleeps (at most 30 s)
#   /slow?seconds=1        a slow endpoint to fetch from
#   /fetch?count=5         fetches /slow?seconds=1 from this same server `count` times at once
#                          (Net::HTTP in Weft tasks) and reports how long all of them took
#   /stats, /metrics       live statistics (answered by the server itself: --stats-path/--metrics-path)
class DemoApp
  INDEX = <<~HTML
    <!doctype html><meta charset="utf-8"><title>Weft demo</title>
    <h1>Weft demo</h1>
    <ul>
      <li><a href="/sleep?seconds=1">/sleep?seconds=1</a> sleeps; try many at once</li>
      <li><a href="/fetch?count=5">/fetch?count=5</a> fetches a 1 s local URL five times concurrently</li>
      <li><a href="/stats">/stats</a> live statistics (JSON), <a href="/metrics">/metrics</a> (Prometheus)</li>
    </ul>
    <p>Served by process %<pid>s.</p>
  HTML

  def call(env)
    request = Rack::Request.new(env)
    case request.path_info
    when "/" then html(format(INDEX, pid: Process.pid))
    when "/hello" then text("Hello World\n")
    when "/sleep", "/slow"
      seconds = seconds_param(request)
      sleep seconds
      text("slept #{seconds} s in process #{Process.pid}\n")
    when "/fetch" then fetch(request)
    else [404, { "content-type" => "text/plain" }, ["not found\n"]]
    end
  end

  private

  def fetch(request)
    count = request.params.fetch("count", "5").to_i.clamp(1, 50)
    uri = URI("http://127.0.0.1:#{request.port}/slow?seconds=1")
    started = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    tasks = Array.new(count) { Weft.spawn { Net::HTTP.get_response(uri).code } }
    codes = Weft.gather(tasks)
    elapsed = Process.clock_gettime(Process::CLOCK_MONOTONIC) - started
    json(fetched: count, statuses: codes, seconds: elapsed.round(3),
         note: "#{count} requests of 1 s each took #{elapsed.round(2)} s: they overlapped")
  end

  def seconds_param(request)
    Float(request.params.fetch("seconds", "1")).clamp(0, 30)
  rescue ArgumentError
    1.0
  end

  def text(body)
    [200, { "content-type" => "text/plain" }, [body]]
  end

  def html(body)
    [200, { "content-type" => "text/html; charset=utf-8" }, [body]]
  end

  def json(data)
    [200, { "content-type" => "application/json" }, [JSON.generate(data)]]
  end
end
