-- Issues a fencing token for a lock that another library holds.
-- KEYS[1]: the other library's lock key
-- KEYS[2]: token counter key (as in counter.lua)
-- KEYS[3]: grant record, a hash: field v = the lock value the last token
--          was issued to, field t = that token
-- ARGV[1]: the lock value of the grant asking
-- Returns {0} when the lock key does not hold ARGV[1] (missing, another
-- value, another type), having written nothing; {1, token} otherwise, the
-- token as a digit string: the recorded one when the record is of this
-- value, else a fresh one, recorded.
local held = redis.pcall('GET', KEYS[1])
if type(held) ~= 'string' or held ~= ARGV[1] then
  return {0}
end

local rec = redis.call('HMGET', KEYS[3], 'v', 't')
if rec[1] == ARGV[1] then
  local t = digits(rec[2])
  if not t or t == '0' or not less(t, '9223372036854775807') then
    return redis.error_reply('FENCEDLOCK_CORRUPT grant record ' .. KEYS[3] ..
      ' holds a token that is not a decimal integer from 1 to 2^63-2')
  end
  -- The same grant asks again: the same token. A counter lost since (or
  -- deleted by hand) is raised to it, so no later grant gets it again.
  local c = read_counter(KEYS[2])
  if type(c) == 'table' then
    return c
  end
  if not c or less(c, t) then
    redis.call('SET', KEYS[2], t)
  end
  return {1, t}
end

local t = next_token()
if type(t) == 'table' then
  return t
end
redis.call('HSET', KEYS[3], 'v', ARGV[1], 't', t)
return {1, t}
