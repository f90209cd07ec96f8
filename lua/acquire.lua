-- Grants a lock and its fencing token in one atomic step.
-- KEYS[1]: lock key, KEYS[2]: token counter key (same hash slot)
-- ARGV[1]: owner nonce, ARGV[2]: TTL in milliseconds
-- Returns {1, token} when granted, {0, pttl of the holder} when held.
-- Checks the counter before writing anything, so an error leaves no lock.
local c = read_counter(KEYS[2])
if type(c) == 'table' then
  return c
end
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {0, redis.call('PTTL', KEYS[1])}
end
if not c then
  redis.call('SET', KEYS[2], clock_seed())
end
local t = redis.call('INCR', KEYS[2])
if t >= 9007199254740992 then
  -- beyond 2^53 a Lua number is not exact: return the stored digits
  t = redis.call('GET', KEYS[2])
end
return {1, t}
