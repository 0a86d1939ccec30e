-- wrk script: POST /v1/crosstab with a well-formed key that does not exist, a new one
-- each time (an attacker's flood). Every answer is 401 (429 past the address's pace).
math.randomseed(os.time())
local alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"

local function random_text(n)
  local out = {}
  for i = 1, n do
    local k = math.random(1, #alphabet)
    out[i] = alphabet:sub(k, k)
  end
  return table.concat(out)
end

function request()
  local key = "ctx_live_" .. random_text(16) .. "_" .. random_text(32)
  return wrk.format("POST", nil, {
    ["Content-Type"] = "application/json",
    ["Service-Engine-Authorizer"] = key,
  }, '{"SurveyCode":"DEMO","PopulationBaseCode":"ADULTS","TargetCodes":["F2554"]}')
end
