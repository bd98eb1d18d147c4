# frozen_string_literal: true

# What a large download costs the client in objects and memory: a body of MIB MiB (default
# 256) from a server process on loopback, read three ways, each in a fresh Ruby process so that
# its peak RSS is its own:
#
# * buffered: `client.get(url, max_body_size: nil).body`
# * streamed: `response.each_chunk { |chunk| }`, a new String per piece
# * streamed into a buffer: `response.each_chunk(buffer) { |chunk| }` (skipped by clients
#   without it)
#
#   bundle exec ruby bench/http_client/download.rb [MIB] [LIB]
#
# LIB is the lib/ directory of the client to measure (default: this checkout's), so that one
# command measures an older version: `git archive <commit> lib | tar -x -C /tmp/old` (and copy
# lib/weft/http1/ruby-X.Y.0/ beside it), then pass /tmp/old/lib.
require_relative "support"

MIB = Integer(ARGV[0] || 256)
LIB = File.expand_path(ARGV[1] || File.join(Bench::ROOT, "lib"))
MODES = %w[buffered streamed streamed_into_buffer].freeze

# The child: downloads once (after a small warm-up request) and prints its figures.
if ENV["WEFT_BENCH_DOWNLOAD_MODE"]
  $LOAD_PATH.unshift(LIB)
  verbose, $VERBOSE = $VERBOSE, nil # Bundler loaded this checkout's Weft::VERSION already
  require "weft/http"
  $VERBOSE = verbose
  mode = ENV.fetch("WEFT_BENCH_DOWNLOAD_MODE")
  client = Weft::HTTP::Client.new(ENV.fetch("WEFT_BENCH_URL"), proxy: nil)
  options = Weft::HTTP::Client::DEFAULTS.key?(:max_body_size) ? { max_body_size: nil, deadline: nil } : {}
  client.get("/small").body
  buffer = String.new
  if mode == "streamed_into_buffer" && Weft::HTTP::Response.instance_method(:each_chunk).arity.zero?
    puts "n/a"
    exit
  end
  GC.start
  objects = GC.stat(:total_allocated_objects)
  gcs = GC.count
  started = Bench.now
  bytes =
    case mode
    when "buffered" then client.get("/big", **options).body.bytesize
    when "streamed"
      client.get("/big", **options) { |response| response.each_chunk.sum(&:bytesize) }
    else
      client.get("/big", **options) do |response|
        total = 0
        response.each_chunk(buffer) { |chunk| total += chunk.bytesize }
        total
      end
    end
  elapsed = Bench.now - started
  raise "got #{bytes} bytes" unless bytes == MIB * 1_048_576
  peak = File.read("/proc/self/status")[/VmHWM:\s*(\d+)/, 1].to_i / 1024.0
  puts format("%d %d %.3f %.0f", GC.stat(:total_allocated_objects) - objects, GC.count - gcs, elapsed, peak)
  exit
end

# The server: answers /small with 5 bytes and /big with MIB MiB (Content-Length), written in
# 1 MiB pieces.
port = Bench.free_port
server = fork do
  listener = TCPServer.new("127.0.0.1", port)
  piece = ("weft" * 262_144).freeze
  loop do
    socket = listener.accept
    Thread.new(socket) do |client|
      loop do
        request = client.readpartial(65_536)
        if request.start_with?("GET /big")
          client.write("HTTP/1.1 200 OK\r\ncontent-length: #{MIB * 1_048_576}\r\n\r\n")
          MIB.times { client.write(piece) }
        else
          client.write("HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nsmall")
        end
      end
    rescue EOFError, SystemCallError, IOError
      client.close
    end
  end
end

begin
  begin
    TCPSocket.new("127.0.0.1", port).close
  rescue SystemCallError
    sleep 0.05
    retry
  end
  $stdout.sync = true
  puts "#{MIB} MiB download from loopback, client from #{LIB} (#{Bench.versions})"
  puts format("%-22s %12s %6s %8s %12s", "mode", "allocations", "GCs", "seconds", "peak RSS MiB")
  MODES.each do |mode|
    env = { "WEFT_BENCH_DOWNLOAD_MODE" => mode, "WEFT_BENCH_URL" => "http://127.0.0.1:#{port}" }
    output = IO.popen(env, [RbConfig.ruby, __FILE__, MIB.to_s, LIB], &:read).split
    abort "#{mode} failed" unless $?.success?
    if output == ["n/a"]
      puts format("%-22s %12s", mode, "n/a")
    else
      objects, gcs, seconds, peak = output
      puts format("%-22s %12s %6s %8s %12s", mode, objects, gcs, seconds, peak)
    end
  end
ensure
  Process.kill(:KILL, server)
  Process.wait(server)
end
