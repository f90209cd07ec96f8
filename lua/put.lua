-- Stores a value and its fencing token if the token is not stale.
-- KEYS[1]: value key (a hash: field t = token, field v = value)
-- ARGV[1]: token, a digit string without leading zeros, below 2^53
-- ARGV[2]: value
-- Returns {1} when stored, {0, current token} when the token is stale.
-- This is the rule of CheckToken in fence.go: token >= current passes.
local cur = redis.call('HGET', KEYS[1], 't')
if cur then
  local n = tonumber(cur)
  if not string.match(cur, '^%d+$') or not n or n >= 9007199254740992 then
    return redis.error_reply('FENCEDLOCK_CORRUPT value key ' .. KEYS[1] ..
      ' holds a token that is not an integer below 2^53')
  end
  if tonumber(ARGV[1]) < n then
    return {0, cur}
  end
end
redis.call('HSET', KEYS[1], 't', ARGV[1], 'v', ARGV[2])
return {1}
