-- The idle expiry of Locker's WithIdleExpiry: a token counter (or a
-- record of its tokens) is kept only while its resource is in use.
-- Times are in milliseconds.

-- How far ahead of the clock, in microseconds, a counter may be and still
-- expire: 30 days. A counter is ahead by microseconds when grants come
-- faster than the clock ticks, and by up to hours when the clock steps
-- back or Advance raised it to a token of a server whose clock was ahead.
-- One further ahead holds a numbering of its own (Advance to a token from
-- elsewhere), which an expiry in months or years would not serve: it is
-- kept for ever.
local ahead_bound = 2592000000000

-- Returns the idle expiry, in milliseconds, of a counter (or a record of
-- its tokens) that has just given token t against the clock seed
-- (microseconds), for a lock that lasts ttl milliseconds: nil to keep it
-- for ever, when idle is 0 or t is more than ahead_bound ahead of the
-- clock.
--
-- A fresh counter gives seed + 1. A token d microseconds above that
-- expires d (rounded up to milliseconds) + ttl + idle after now: when a
-- counter is seeded from the clock again, the clock is then at least
-- ttl + idle past t, as for a token at seed + 1. So tokens keep rising
-- unless the clock steps back by more than that.
local function idle_expiry(t, seed, ttl, idle)
  if idle == 0 then
    return nil
  end
  -- below 2^53 (the clock is), so exact as a Lua number
  local fresh = tonumber(seed) + 1
  local limit = string.format('%d', fresh + ahead_bound)
  -- t is a digit string without leading zeros: compare it as one, since
  -- a Lua number is not exact beyond 2^53
  if #t > #limit or (#t == #limit and t > limit) then
    return nil
  end
  -- t is at most limit now, so exact as a Lua number too
  local ahead = math.max(0, math.ceil((tonumber(t) - fresh) / 1000))
  return ahead + ttl + idle
end

-- Sets the expiry that idle_expiry decides on key.
local function expire_idle(key, t, seed, ttl, idle)
  local px = idle_expiry(t, seed, ttl, idle)
  if px then
    redis.call('PEXPIRE', key, string.format('%d', px))
  else
    redis.call('PERSIST', key)
  end
end

-- Extends the idle expiry of key, a counter whose lock was just refreshed
-- (or renewed) for ttl milliseconds, to at least ttl + idle from now: a
-- held lock's keys never expire before it does. A key kept for ever stays
-- so; a lock without expiry (ttl -1, another library's) keeps it for
-- ever.
local function extend_idle(key, ttl, idle)
  if idle == 0 then
    return
  end
  if ttl < 0 then
    redis.call('PERSIST', key)
    return
  end
  local left = redis.call('PTTL', key)
  if left >= 0 and left < ttl + idle then
    redis.call('PEXPIRE', key, string.format('%d', ttl + idle))
  end
end
