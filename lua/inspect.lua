-- Reads what a resource's keys hold, writing nothing.
-- KEYS[1]: lock key, KEYS[2]: token counter key, KEYS[3]: the queue's
-- deadlines (see queue.lua)
--
-- Returns {lock, pttl, waiters, counter}: the lock key's value (the
-- holder's nonce, ':', its token) or false when free; its PTTL (negative
-- when free); how many queue entries are alive (their deadline is ahead
-- of the server clock); the counter's value or false when missing.
-- A key of the wrong type is an error reply (WRONGTYPE).
local lock = redis.call('GET', KEYS[1])
local pttl = redis.call('PTTL', KEYS[1])
local counter = redis.call('GET', KEYS[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local waiters = 0
local d = redis.call('HGETALL', KEYS[3])
for i = 2, #d, 2 do
  local deadline = tonumber(d[i])
  if deadline and deadline > now then
    waiters = waiters + 1
  end
end
return {lock, pttl, waiters, counter}
