-- The token counter of a resource, and grants of its tokens.
--@requires get clock idle
--
-- A counter holds a non-negative decimal integer that INCR can still raise:
-- at most 2^63 - 2. Comparisons are done on digit strings, never on Lua
-- numbers, which are doubles and exact only up to 2^53.

-- Returns s if it is a decimal integer as INCR reads one (digits, no
-- leading zero but for "0" itself), nil otherwise.
local function digits(s)
  if type(s) ~= 'string' then
    return nil
  end
  if s == '0' or string.match(s, '^[1-9]%d*$') then
    return s
  end
  return nil
end

-- Whether digit string a < digit string b (both without leading zeros).
local function less(a, b)
  if #a ~= #b then
    return #a < #b
  end
  return a < b
end

-- Returns the counter's value as a digit string, nil when the key is
-- missing, or an error reply (a table) when it holds anything else,
-- including a value of another type.
local function read_counter(key)
  local raw = get(key)
  if not raw then
    return nil
  end
  local c = digits(raw)
  if not c then
    return redis.error_reply('FENCEDLOCK_CORRUPT token counter ' .. key ..
      ' does not hold a decimal integer from 0 to 2^63-2')
  end
  if not less(c, '9223372036854775807') then
    return redis.error_reply('FENCEDLOCK_CORRUPT token counter ' .. key ..
      ' has reached 2^63-1: it can grant no higher token')
  end
  return c
end

-- Returns a fresh token from the counter at key as a digit string, and
-- the clock seed it was compared with, having written the counter and its
-- idle expiry for a lock that lasts ttl milliseconds (see expire_idle);
-- or an error reply (a table), having written nothing, when the counter
-- is unusable.
--
-- The token is the counter plus one, after raising the counter to the
-- server clock in microseconds when it is missing or behind it. A counter
-- that is lost (FLUSHALL, a restart, its idle expiry), or that lags
-- because a replica promoted in a failover missed INCRs, so does not
-- grant a token again, as long as the servers' clocks do not step back.
-- The counter is normally behind the clock (tokens are microseconds, and
-- grants are further apart): then one SET writes the token and the
-- expiry.
local function next_token(key, ttl, idle)
  local c = read_counter(key)
  if type(c) == 'table' then
    return c
  end
  local seed = clock_seed()
  if not c or less(c, seed) then
    -- below 2^53 (the clock is), so exact as a Lua number
    local t = string.format('%d', tonumber(seed) + 1)
    local px = idle_expiry(t, seed, ttl, idle)
    if px then
      redis.call('SET', key, t, 'PX', string.format('%d', px))
    else
      redis.call('SET', key, t)
    end
    return t, seed
  end
  local n = redis.call('INCR', key)
  local t
  if n < 9007199254740992 then
    t = string.format('%d', n)
  else
    -- beyond 2^53 a Lua number is not exact: use the stored digits
    t = redis.call('GET', key)
  end
  expire_idle(key, t, seed, ttl, idle)
  return t, seed
end

-- Grants the lock at lock_key to owner for ttl milliseconds with a fresh
-- token from the counter at counter_key, overwriting the lock key, and
-- returns the token. The counter expires idle milliseconds after the lock
-- could last (see expire_idle). Returns an error reply (a table), having
-- written nothing, when the counter is unusable.
local function grant(lock_key, counter_key, owner, ttl, idle)
  ttl = tonumber(ttl)
  local t = next_token(counter_key, ttl, idle)
  if type(t) == 'table' then
    return t
  end
  redis.call('SET', lock_key, owner .. t, 'PX', ttl)
  return t
end
