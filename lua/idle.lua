-- Shared prelude of the scripts that keep a token counter (or a record
-- of its tokens) only while its resource is in use: the idle expiry of
-- Locker's WithIdleExpiry. Times are in milliseconds.

-- Whether a counter (or a record of its tokens) that has just given token
-- t against the clock seed (microseconds) must be kept for ever: when idle
-- is 0, or when t is ahead of the clock (Advance raised the counter past
-- it, or the clock stepped back), which only the clock overtaking it ends.
-- Otherwise t is at most seed + 1, and expiring the key ttl + idle after
-- now leaves the clock at least idle past t when a counter is seeded from
-- it again: safe unless the clock steps back by more than idle.
local function keeps_for_ever(t, seed, idle)
  return idle == 0 or #t > 16 or tonumber(t) > tonumber(seed) + 1
end

-- Sets the expiry that keeps_for_ever decides on key, for a lock that
-- lasts ttl milliseconds.
local function expire_idle(key, t, seed, ttl, idle)
  if keeps_for_ever(t, seed, idle) then
    redis.call('PERSIST', key)
  else
    redis.call('PEXPIRE', key, string.format('%d', ttl + idle))
  end
end

-- Extends the idle expiry of key, a counter whose lock was just refreshed
-- (or renewed) for ttl milliseconds, to at least ttl + idle from now: a
-- held lock's keys never expire before it does. A key kept for ever stays
-- so.
local function extend_idle(key, ttl, idle)
  if idle == 0 then
    return
  end
  local left = redis.call('PTTL', key)
  if left >= 0 and left < ttl + idle then
    redis.call('PEXPIRE', key, string.format('%d', ttl + idle))
  end
end
