-- wrk script for scripts/bench-soak: every request a new question, over several
-- surveys, each question asked twice in a row (a set is kept on its second sight), so
-- every cache of the server grows as fast as a client can make it: response bodies,
-- leaf and composite sets of every survey. The key comes from CROSSTAB_KEY, the survey
-- codes from CROSSTAB_SURVEYS (comma-separated).
local key = os.getenv("CROSSTAB_KEY") or ""
local surveys = {}
for code in string.gmatch(os.getenv("CROSSTAB_SURVEYS") or "DEMO", "[^,]+") do
  surveys[#surveys + 1] = code
end
local threads = 0
local n = 0

function setup(thread)
  thread:set("offset", threads * 1000000000)
  threads = threads + 1
end

function init(args)
  n = tonumber(offset) or 0
end

function request()
  n = n + 1
  local q = math.floor(n / 2)
  local survey = surveys[1 + q % #surveys]
  local body
  if survey == "DEMO" then
    body = string.format(
      '{"SurveyCode":"DEMO","PopulationBaseCode":"ADULTS","TargetCodes":["AGE BETWEEN %d AND %d OR INCOME = %d","NOT (GENDER = %d) AND AGE != %d"]}',
      18 + q % 50, 30 + q % 60, 1 + q % 7, 1 + q % 2, q % 100000)
  else
    body = string.format(
      '{"SurveyCode":"%s","PopulationBaseCode":"ALL","TargetCodes":["V1 BETWEEN %d AND %d OR V2 = %d","V3 IN (%d, %d, %d) AND NOT V1 = %d"]}',
      survey, q % 500, 500 + q % 500, q % 100, q % 50, 50 + q % 50, q % 1000, q % 100000)
  end
  return wrk.format("POST", nil, {
    ["Content-Type"] = "application/json",
    ["Service-Engine-Authorizer"] = key,
  }, body)
end
