-- advance: raises a token counter so that the next grant is above a
-- floor.
--
-- KEYS[1]  the token counter
-- ARGV[1]  the floor, a digit string without leading zeros, below
--          2^63-1
-- ARGV[2]  the idle expiry in milliseconds (0: none) of the counter
--
-- Replies:
--   counter          the counter's value afterwards, a digit string at or
--                    above the floor
--   an error reply   FENCEDLOCK_CORRUPT when the counter is unusable:
--                    nothing is written
--
-- A counter it writes expires after idle, plus as far as it is ahead of
-- the clock, or is kept for ever when that is too far (see idle_expiry).
--@include get clock idle counter

local c = read_counter(KEYS[1])
if type(c) == 'table' then
  return c
end
local floor = ARGV[1]
local seed = clock_seed()
if not c or less(c, floor) then
  -- a missing counter is seeded as on acquire, and never below the floor
  c = floor
  if less(c, seed) then
    c = seed
  end
  -- no lock: the counter is kept for its idle expiry alone
  local px = idle_expiry(c, seed, 0, tonumber(ARGV[2]))
  if px then
    redis.call('SET', KEYS[1], c, 'PX', string.format('%d', px))
  else
    redis.call('SET', KEYS[1], c)
  end
end
return c
