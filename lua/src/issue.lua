-- issue: issues a fencing token for a lock that another library holds.
--
-- KEYS[1]  the other library's lock key
-- KEYS[2]  the token counter of its tokens
-- KEYS[3]  the grant record, a hash: field v = the lock value the last
--          token was issued to, field t = that token
-- ARGV[1]  the lock value of the grant asking
-- ARGV[2]  the idle expiry in milliseconds (0: none) of the counter and
--          the record, counted from the lock key's own expiry
--
-- Replies:
--   {ISSUED (1), token, pttl}   token (a digit string) is the recorded
--                               one when the record is of this value,
--                               else a fresh one, recorded; pttl is the
--                               lock key's PTTL (-1: no expiry), which
--                               the Locker keeps the two keys for
--                               (keep_issued.lua)
--   {NOT_HELD (0)}              the lock key does not hold ARGV[1]
--                               (missing, another value, another type):
--                               nothing is written
--   an error reply              FENCEDLOCK_CORRUPT when the counter or
--                               the record holds what the library did
--                               not write: nothing is written
local ISSUED, NOT_HELD = 1, 0
--@include get clock idle counter

local held = get(KEYS[1])
if type(held) ~= 'string' or held ~= ARGV[1] then
  return {NOT_HELD}
end

local rec = redis.call('HMGET', KEYS[3], 'v', 't')
local last
if rec[1] or rec[2] then
  last = digits(rec[2])
  if not rec[1] or not last or last == '0' or not less(last, '9223372036854775808') then
    return redis.error_reply('FENCEDLOCK_CORRUPT grant record ' .. KEYS[3] ..
      ' does not hold a value and a token from 1 to 2^63-1')
  end
  -- The counter is never below the last token issued: a counter lost
  -- since (evicted, deleted by hand) would otherwise issue it, or lower
  -- ones, again.
  local c
  if rec[1] == ARGV[1] and last == '9223372036854775807' then
    -- This grant holds the highest token there is. The counter can only
    -- be at it, or lost; read_counter, which refuses a counter that no
    -- grant can follow, is for grants that need a new token.
    c = get(KEYS[2])
    if c and c ~= last then
      return redis.error_reply('FENCEDLOCK_CORRUPT token counter ' .. KEYS[2] ..
        ' is not at the token 2^63-1 its grant record holds')
    end
  else
    c = read_counter(KEYS[2])
    if type(c) == 'table' then
      return c
    end
  end
  if rec[1] ~= ARGV[1] and last == '9223372036854775807' then
    -- a new grant after the highest token there is: refuse before
    -- writing, as read_counter would after the restore below
    return redis.error_reply('FENCEDLOCK_CORRUPT grant record ' .. KEYS[3] ..
      ' holds 2^63-1: no new grant can get a higher token')
  end
  if not c or less(c, last) then
    -- with the record's expiry, so that it goes when the record does
    local left = redis.call('PTTL', KEYS[3])
    if left > 0 then
      redis.call('SET', KEYS[2], last, 'PX', left)
    else
      redis.call('SET', KEYS[2], last)
    end
  end
  if rec[1] == ARGV[1] then
    -- the same grant asks again: the same token, and its keys are kept
    -- as long as the lock key may now last
    local ttl = redis.call('PTTL', KEYS[1])
    extend_idle(KEYS[2], ttl, tonumber(ARGV[2]))
    extend_idle(KEYS[3], ttl, tonumber(ARGV[2]))
    return {ISSUED, last, ttl}
  end
end

-- The keys last the lock key's TTL plus the idle expiry; a lock key
-- without expiry (PTTL -1) keeps both for ever.
local pttl = redis.call('PTTL', KEYS[1])
local ttl, idle = pttl, tonumber(ARGV[2])
if ttl < 0 then
  idle = 0
  ttl = 0
end
local t, seed = next_token(KEYS[2], ttl, idle)
if type(t) == 'table' then
  return t
end
redis.call('HSET', KEYS[3], 'v', ARGV[1], 't', t)
expire_idle(KEYS[3], t, seed, ttl, idle)
return {ISSUED, t, pttl}
