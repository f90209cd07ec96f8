-- keep_issued: keeps the token counter and grant record of IssueToken
-- (issue.lua) while the grant of their last token still holds its lock
-- key, however often another library extends the lock key without
-- asking again. The Locker that issued the token runs it in the
-- background.
--
-- KEYS[1]  the other library's lock key
-- KEYS[2]  the token counter of its tokens
-- KEYS[3]  the grant record
-- ARGV[1]  the lock value of the grant
-- ARGV[2]  the idle expiry in milliseconds (not 0)
--
-- Replies:
--   {KEPT (1), pttl}   the grant holds its lock key, whose PTTL is pttl:
--                      both keys now expire at least pttl + idle from
--                      now, or are kept for ever when the lock key has
--                      no expiry (pttl -1)
--   {OVER (0)}         the lock key does not hold ARGV[1], or the record
--                      is not of it: the grant is over, nothing is
--                      written
local KEPT, OVER = 1, 0
--@include get idle

local held = get(KEYS[1])
if type(held) ~= 'string' or held ~= ARGV[1] then
  return {OVER}
end
local v = hget(KEYS[3], 'v')
if type(v) ~= 'string' or v ~= ARGV[1] then
  return {OVER}
end
local pttl = redis.call('PTTL', KEYS[1])
extend_idle(KEYS[2], pttl, tonumber(ARGV[2]))
extend_idle(KEYS[3], pttl, tonumber(ARGV[2]))
return {KEPT, pttl}
