# frozen_string_literal: true

# The app the soak test (bench/soak/run) serves: a mix of cheap, I/O-waiting, body-reading,
# large, streamed and failing responses, and /__gc for the runner.
BIG = ("x" * 65_536).freeze

run lambda { |env|
  case env["PATH_INFO"]
  when "/"
    [200, { "content-type" => "text/plain" }, ["Hello World"]]
  when "/sleep"
    sleep 0.005
    [200, { "content-type" => "text/plain" }, ["slept"]]
  when "/echo"
    size = 0
    buffer = String.new
    size += buffer.bytesize while env["rack.input"].read(65_536, buffer)
    [200, { "content-type" => "text/plain" }, [size.to_s]]
  when "/big"
    [200, { "content-type" => "text/plain" }, [BIG]]
  when "/stream"
    [200, { "content-type" => "text/plain" }, Enumerator.new { |out| 8.times { |i| out << "part #{i}\n" } }]
  when "/error"
    raise "soak: this endpoint always fails"
  when "/__gc"
    # For the soak runner: memory that survives a full GC, free of the garbage sawtooth.
    GC.start
    body = %({"live_slots":#{GC.stat(:heap_live_slots)},"rss_kb":#{File.read('/proc/self/status')[/^VmRSS:\s+(\d+)/, 1]}})
    [200, { "content-type" => "application/json" }, [body]]
  else
    [404, { "content-type" => "text/plain" }, ["not found"]]
  end
}
