# frozen_string_literal: true

# What a large upload costs the server in malloc'd bytes (the request-body spool, issue #13's
# Ruby 3.3 memory growth): POST a body, bracketed by GET /?start and GET /?stop.
#
#   bundle exec exe/weft serve -w 0 -q -p 9400 bench/server/upload_malloc.ru
#   head -c 10485760 /dev/zero > /tmp/body10
#   curl -s localhost:9400/?start; curl -s -H 'Expect:' --data-binary @/tmp/body10 localhost:9400/
#   curl -s localhost:9400/?stop      # => malloc_increase=...KB objects=...
#   (add -H 'Transfer-Encoding: chunked' to the POST for a chunked body)
#
# The GC is off between start and stop, so GC.stat's malloc_increase_bytes counts every byte
# malloc'd meanwhile; the app reads the body in 64 KiB pieces into one buffer, as
# test/server/fixtures/upload.ru does.
run lambda { |env|
  if env["REQUEST_METHOD"] == "GET"
    case env["QUERY_STRING"]
    when "start"
      GC.start
      GC.disable
      $upload_malloc = [GC.stat(:malloc_increase_bytes), GC.stat(:total_allocated_objects)]
      return [200, {}, ["started\n"]]
    when "stop"
      malloced, objects = $upload_malloc
      figures = "malloc_increase=#{(GC.stat(:malloc_increase_bytes) - malloced) / 1024}KB " \
                "objects=#{GC.stat(:total_allocated_objects) - objects}\n"
      GC.enable
      return [200, {}, [figures]]
    end
  end
  input = env["rack.input"]
  size = 0
  buffer = String.new
  size += buffer.bytesize while input.read(65_536, buffer)
  [200, { "content-type" => "text/plain" }, [size.to_s]]
}
