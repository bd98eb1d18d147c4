-- wrk script for the soak test (bench/soak/run): the mix of bench/soak/app.ru's endpoints,
-- and a count of the answers by status, printed at the end as JSON.
local upload = string.rep("u", 1048576)
local requests = {}
local weights = {}
counts = {}

local mix = {
  { 30, "GET", "/db" }, { 15, "GET", "/tx" }, { 5, "GET", "/db_deadline" }, { 2, "GET", "/db_error" },
  { 20, "GET", "/up" }, { 5, "GET", "/up_deadline" }, { 15, "GET", "/mix" }, { 5, "GET", "/stream" },
  { 2, "POST", "/upload", upload }, { 1, "GET", "/big" },
}

init = function(args)
  for i, m in ipairs(mix) do
    weights[i] = m[1]
    requests[i] = wrk.format(m[2], m[3], nil, m[4])
  end
end

request = function()
  local r = math.random(100)
  for i, w in ipairs(weights) do
    if r <= w then return requests[i] end
    r = r - w
  end
  return requests[1]
end

local threads = {}
setup = function(thread) table.insert(threads, thread) end

response = function(status, headers, body)
  counts[status] = (counts[status] or 0) + 1
end

done = function(summary, latency, requests)
  local total = {}
  for _, thread in ipairs(threads) do
    -- a thread's table comes back as a copy through thread:get
    for status, n in pairs(thread:get("counts")) do total[status] = (total[status] or 0) + n end
  end
  local parts = {}
  for status, n in pairs(total) do table.insert(parts, string.format('"%d":%d', status, n)) end
  io.write("STATUSES {" .. table.concat(parts, ",") .. "}\n")
end
