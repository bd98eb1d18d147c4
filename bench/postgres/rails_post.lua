-- wrk script for bench/postgres/rails_bench.rb: every request is
-- POST /authors/<1..authors>/posts with a title no other request used, so the app's
-- uniqueness validation passes and each request inserts a post.
--   wrk -s bench/postgres/rails_post.lua URL -- <run tag> <authors>
local threads = 0

function setup(thread)
  thread:set("thread_number", threads)
  threads = threads + 1
end

function init(args)
  tag = args[1] or "run"
  authors = tonumber(args[2] or "200")
  sent = 0
  math.randomseed(os.time() + thread_number)
end

function request()
  sent = sent + 1
  local author = math.random(1, authors)
  local title = tag .. "-" .. thread_number .. "-" .. sent
  return wrk.format("POST", "/authors/" .. author .. "/posts",
                    { ["Content-Type"] = "application/x-www-form-urlencoded" }, "title=" .. title)
end
