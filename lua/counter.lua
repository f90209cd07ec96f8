-- Shared prelude of the scripts that touch a token counter.
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
  local raw = redis.pcall('GET', key)
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

-- The Redis server clock in microseconds, as a digit string: the floor of
-- a counter when a token is granted.
local function clock_seed()
  local now = redis.call('TIME')
  return now[1] .. string.format('%06d', tonumber(now[2]))
end
