-- Keeps the token counter and grant record of IssueToken (issue.lua
-- documents the keys) while the grant of their last token still holds
-- its lock key, however often another library extends the lock key
-- without asking again. The Locker that issued the token runs it in the
-- background.
-- KEYS[1]: the other library's lock key
-- KEYS[2]: token counter key
-- KEYS[3]: grant record
-- ARGV[1]: the lock value of the grant
-- ARGV[2]: the idle expiry in milliseconds (not 0)
-- Returns {0} when the lock key does not hold ARGV[1], or the record is
-- not of it: the grant is over, nothing written. Else {1, pttl}, pttl the
-- lock key's PTTL, having extended both keys to expire at least pttl +
-- idle from now, or kept them for ever when the lock key has no expiry
-- (pttl -1).
local held = redis.pcall('GET', KEYS[1])
if type(held) ~= 'string' or held ~= ARGV[1] then
  return {0}
end
local v = redis.pcall('HGET', KEYS[3], 'v')
if type(v) ~= 'string' or v ~= ARGV[1] then
  return {0}
end
local pttl = redis.call('PTTL', KEYS[1])
extend_idle(KEYS[2], pttl, tonumber(ARGV[2]))
extend_idle(KEYS[3], pttl, tonumber(ARGV[2]))
return {1, pttl}
