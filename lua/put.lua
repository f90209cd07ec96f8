-- Stores a value and its fencing token if the token is not below the
-- fence (see stored.lua).
-- KEYS[1]: value key
-- ARGV[1]: token, a decimal digit string from 1 to 2^64-1, no leading zero
-- ARGV[2]: value
-- Returns {STORED (1)} when stored, {STALE (0), fence} when the token is
-- below the fence. This is the rule of CheckToken in fence.go: token >=
-- fence passes, and the fence rises to the token.
local STORED, STALE = 1, 0
local fence = read_fence(KEYS[1])
if type(fence) == 'table' then
  return fence
end
if fence and below(ARGV[1], fence) then
  return {STALE, fence}
end
redis.call('HSET', KEYS[1], 't', ARGV[1], 'v', ARGV[2], 'f', ARGV[1])
return {STORED}
