-- wrk script: POST /v1/crosstab on the demo survey with a different request each time,
-- so the server's response cache never hits (the engine-bound figure).
-- Each thread walks a cycle of 60 * 40 * 7 = 16,800 distinct target pairs, the threads
-- half a cycle apart: a body comes back only after ~16,800 others were inserted, far
-- beyond the cache's 4,096 entries (oldest evicted first), so every request is a miss.
-- The key comes from the environment (CROSSTAB_KEY), set by scripts/bench-server.sh.
local key = os.getenv("CROSSTAB_KEY") or ""
local threads = 0
local n = 0

function setup(thread)
  thread:set("offset", threads * 8400)
  threads = threads + 1
end

function init(args)
  n = tonumber(offset) or 0
end

function request()
  n = n + 1
  local a = 18 + n % 60
  local b = a + math.floor(n / 60) % 40
  local c = 1 + math.floor(n / 2400) % 7
  local body = string.format(
    '{"SurveyCode":"DEMO","PopulationBaseCode":"ADULTS","TargetCodes":["AGE BETWEEN %d AND %d","GENDER = 2 AND INCOME >= %d"]}',
    a, b, c)
  return wrk.format("POST", nil, {
    ["Content-Type"] = "application/json",
    ["Service-Engine-Authorizer"] = key,
  }, body)
end
