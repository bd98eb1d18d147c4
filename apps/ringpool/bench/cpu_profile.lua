-- wrk script of apps/ringpool/bench/cpu_profile.rb (run with -t1):
--   wrk -t1 -cN -d600s -s cpu_profile.lua URL -- BODIES_FILE REQUESTS
-- POSTs the bodies of BODIES_FILE (one JSON document a line) to /allocations in turn, stops
-- after REQUESTS answers (the process exits then, see finish), and counts the answers by status and their items by kind.
local bodies = {}
local position = 1
local limit = 0
answered = 0
failed = 0
tracked = 0
exhausted = 0
shard_unavailable = 0
storage_unavailable = 0
item_errors = 0

function init(args)
  for line in io.lines(args[1]) do bodies[#bodies + 1] = line end
  limit = tonumber(args[2])
end

function request()
  local body = bodies[position]
  position = position % #bodies + 1
  return wrk.format("POST", "/allocations", { ["Content-Type"] = "application/json" }, body)
end

local function occurrences(text, pattern)
  local _, count = string.gsub(text, pattern, "")
  return count
end

function response(status, headers, body)
  answered = answered + 1
  if status ~= 200 then
    failed = failed + 1
  else
    tracked = tracked + occurrences(body, '"overflow":false')
    exhausted = exhausted + occurrences(body, '"reason":"exhausted"')
    shard_unavailable = shard_unavailable + occurrences(body, '"reason":"shard_unavailable"')
    storage_unavailable = storage_unavailable + occurrences(body, '"reason":"storage_unavailable"')
    item_errors = item_errors + occurrences(body, '"error":')
  end
  if answered >= limit then finish() end
end

-- wrk's thread:stop() only stops sending: wrk would still wait out its -d duration. So the
-- one thread (-t1) prints the counts and ends the process itself.
function finish()
  local names = { "answered", "failed", "tracked", "exhausted", "shard_unavailable", "storage_unavailable", "item_errors" }
  for _, name in ipairs(names) do io.write(string.format("COUNT %s %d\n", name, _G[name])) end
  io.flush()
  os.exit(0)
end
