-- fence: raises the fence of a value key to a token, unless the fence is
-- higher. With ARGV[2] = 'read' it also returns the value and the token
-- that wrote it: the fenced read of Update.
--
-- KEYS[1]  the value key
-- ARGV[1]  the token, a decimal digit string from 1 to 2^64-1, no
--          leading zero
-- ARGV[2]  'read' or ''
--
-- Replies:
--   {FENCED (1)}                 the token is at or above the fence,
--                                which is now at it
--   {FENCED (1), token, value}   the same, for a read: the token that
--                                wrote the value (a digit string) and
--                                the value, each false when no value
--                                was written
--   {STALE (0), fence}           the token is below the fence (a digit
--                                string): nothing is written
--   an error reply               FENCEDLOCK_CORRUPT when the key holds
--                                a token the store did not write,
--                                WRONGTYPE when it is not a hash:
--                                nothing is written
local FENCED, STALE = 1, 0
--@include stored

local fence = read_fence(KEYS[1])
if type(fence) == 'table' then
  return fence
end
if fence and below(ARGV[1], fence) then
  return {STALE, fence}
end
if fence ~= ARGV[1] then
  redis.call('HSET', KEYS[1], 'f', ARGV[1])
end
if ARGV[2] == 'read' then
  local stored = redis.call('HMGET', KEYS[1], 't', 'v')
  return {FENCED, stored[1], stored[2]}
end
return {FENCED}
