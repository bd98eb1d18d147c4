# frozen_string_literal: true

# Micro-benchmark: parse a typical browser request head (10 header fields)
# into a fresh Rack env hash, N times, with Weft's parser and Puma's.
#   bundle exec ruby bench/http1_parser.rb [N]
$LOAD_PATH.unshift File.expand_path("../lib", __dir__)
require "weft/http1/parser"

begin
  require "puma"
  require "puma/puma_http11"
rescue LoadError
  puts "puma not available (bundle it in the :bench group); Weft only"
end

N = Integer(ARGV[0] || 300_000)

REQUEST = ("GET /search?q=weft&lang=en HTTP/1.1\r\n" \
           "Host: www.example.com\r\n" \
           "User-Agent: Mozilla/5.0 (X11; Linux x86_64; rv:120.0) Gecko/20100101 Firefox/120.0\r\n" \
           "Accept: text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8\r\n" \
           "Accept-Language: en-US,en;q=0.5\r\n" \
           "Accept-Encoding: gzip, deflate, br\r\n" \
           "Connection: keep-alive\r\n" \
           "Cookie: session=0123456789abcdef; theme=dark\r\n" \
           "Upgrade-Insecure-Requests: 1\r\n" \
           "Sec-Fetch-Dest: document\r\n" \
           "Sec-Fetch-Mode: navigate\r\n" \
           "\r\n").b.freeze

def measure(name, n)
  yield # warm up
  GC.start
  allocs = GC.stat(:total_allocated_objects)
  t = Process.clock_gettime(Process::CLOCK_MONOTONIC)
  n.times { yield }
  dt = Process.clock_gettime(Process::CLOCK_MONOTONIC) - t
  per = (GC.stat(:total_allocated_objects) - allocs).fdiv(n)
  ops = n / dt
  printf("%-6s %10.0f ops/s  %6.2f us/op  %5.1f objects/op\n", name, ops, 1e6 / ops, per)
  ops
end

weft = Weft::HTTP1::RequestParser.new
env = {}
raise "weft did not parse" unless weft.parse(REQUEST, env) == REQUEST.bytesize

results = {}
3.times do |round|
  puts "round #{round + 1} (N=#{N})"
  # Puma's parser rewrites header names inside the buffer it is given, so both
  # parsers get a fresh (unshared) copy each time (as a server's read buffer would be).
  results[:weft] = [results[:weft].to_f, measure("weft", N) { weft.parse((String.new(capacity: 1024) << REQUEST), {}) }].max
  next unless defined?(Puma::HttpParser)

  puma = Puma::HttpParser.new
  results[:puma] = [results[:puma].to_f, measure("puma", N) do
    puma.reset
    puma.execute({}, (String.new(capacity: 1024) << REQUEST), 0)
  end].max
end

puts "best: weft #{results[:weft].round} ops/s" + (results[:puma] ? ", puma #{results[:puma].round} ops/s, ratio weft/puma = #{(results[:weft] / results[:puma]).round(2)}x" : "")
