# frozen_string_literal: true

# The origin for the client benchmarks: a tiny fixed response.
BODY = ["hello from the origin\n"].freeze
run ->(_env) { [200, { "content-type" => "text/plain", "content-length" => BODY[0].bytesize.to_s }, BODY] }
