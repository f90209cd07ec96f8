-- Stores a value and its fencing token if the token is not stale.
-- KEYS[1]: value key (a hash: field t = token, field v = value)
-- ARGV[1]: token, a decimal digit string from 1 to 2^64-1, no leading zero
-- ARGV[2]: value
-- Returns {1} when stored, {0, current token} when the token is stale.
-- This is the rule of CheckToken in fence.go: token >= current passes.
-- Tokens are compared as digit strings, never as Lua numbers, which are
-- doubles and exact only up to 2^53.
local cur = redis.call('HGET', KEYS[1], 't')
if cur then
  if not string.match(cur, '^[1-9]%d*$') or #cur > 20 or
      (#cur == 20 and cur > '18446744073709551615') then
    return redis.error_reply('FENCEDLOCK_CORRUPT value key ' .. KEYS[1] ..
      ' holds a token that is not an integer from 1 to 2^64-1')
  end
  local tok = ARGV[1]
  if #tok < #cur or (#tok == #cur and tok < cur) then
    return {0, cur}
  end
end
redis.call('HSET', KEYS[1], 't', ARGV[1], 'v', ARGV[2])
return {1}
