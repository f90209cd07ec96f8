-- Shared prelude of the scripts that keep a token counter (or a record
-- of its tokens) only while its resource is in use: the idle expiry of
-- Locker's WithIdleExpiry. Times are in milliseconds.

-- Whether a counter (or a record of its tokens) that has just given token
-- t against the clock seed, for a lock that lasts ttl milliseconds, must
-- be kept for ever rather than expire idle milliseconds after the lock
-- could last: when idle is 0, or when t is so far ahead of the clock
-- (Advance raised the counter) that a counter seeded from the clock after
-- that expiry could be at or below t. Otherwise the seeded counter is
-- above t, unless the clock steps back by more than idle.
--
-- expire_idle sets the expiry that keeps_for_ever decides.
local function keeps_for_ever(t, seed, ttl, idle)
  local limit = tonumber(seed) + (ttl + idle) * 1000
  return idle == 0 or limit >= 9007199254740992 or #t > 16 or tonumber(t) >= limit
end

local function expire_idle(key, t, seed, ttl, idle)
  if keeps_for_ever(t, seed, ttl, idle) then
    redis.call('PERSIST', key)
  else
    redis.call('PEXPIRE', key, ttl + idle)
  end
end

-- Extends the idle expiry of key, a counter whose lock was just refreshed
-- for ttl milliseconds, to at least ttl + idle from now: a held lock's
-- keys never expire before it does. A key kept for ever stays so.
local function extend_idle(key, ttl, idle)
  if idle == 0 then
    return
  end
  local left = redis.call('PTTL', key)
  if left >= 0 and left < ttl + idle then
    redis.call('PEXPIRE', key, ttl + idle)
  end
end
