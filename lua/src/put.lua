-- put: stores a value and its fencing token if the token is not below
-- the fence.
--
-- KEYS[1]  the value key
-- ARGV[1]  the token, a decimal digit string from 1 to 2^64-1, no
--          leading zero
-- ARGV[2]  the value
--
-- Replies:
--   {STORED (1)}          stored; the fence is at the token
--   {STALE (0), fence}    the token is below the fence (a digit string):
--                         nothing is written
--   an error reply        FENCEDLOCK_CORRUPT when the key holds a token
--                         the store did not write, WRONGTYPE when it is
--                         not a hash: nothing is written
--
-- This is the rule of CheckToken in fence.go: token >= fence passes, and
-- the fence rises to the token.
local STORED, STALE = 1, 0
--@include stored

local fence = read_fence(KEYS[1])
if type(fence) == 'table' then
  return fence
end
if fence and below(ARGV[1], fence) then
  return {STALE, fence}
end
redis.call('HSET', KEYS[1], 't', ARGV[1], 'v', ARGV[2], 'f', ARGV[1])
return {STORED}
