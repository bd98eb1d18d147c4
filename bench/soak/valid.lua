-- wrk script for the soak test: a mix of the app's endpoints (bench/soak/app.ru).
local body = string.rep("u", 16384)
local requests = {}

init = function(args)
  requests = {
    wrk.format("GET", "/"),
    wrk.format("GET", "/sleep"),
    wrk.format("POST", "/echo", { ["Content-Type"] = "text/plain" }, body),
    wrk.format("GET", "/big"),
    wrk.format("GET", "/stream"),
    wrk.format("GET", "/error"),
  }
end

-- 55% hello, 15% sleep, 10% upload, 10% 64 KB, 5% streamed, 5% failing
local weights = { 55, 15, 10, 10, 5, 5 }

request = function()
  local r = math.random(100)
  for i, w in ipairs(weights) do
    if r <= w then return requests[i] end
    r = r - w
  end
  return requests[1]
end
