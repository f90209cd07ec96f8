-- The Redis server clock, read once per run.

local server_time

-- The server clock: {seconds, microseconds}, as TIME answers.
local function now()
  if not server_time then
    server_time = redis.call('TIME')
  end
  return server_time
end

-- The server clock in microseconds, as a digit string: the floor of a
-- counter when a token is granted, and the arrival of a queue entry.
local function clock_seed()
  local t = now()
  return t[1] .. string.format('%06d', tonumber(t[2]))
end

-- The server clock in milliseconds, as a number (exact: below 2^53).
local function now_ms()
  local t = now()
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
