-- Raises a token counter so the next grant is above a floor.
-- KEYS[1]: token counter key
-- ARGV[1]: floor, a digit string without leading zeros, below 2^63-1
-- ARGV[2]: the idle expiry in milliseconds (0: none) of the counter
-- Returns the counter's value afterwards, as a string.
--
-- A counter it writes expires after idle, plus as far as it is ahead of
-- the clock, or is kept for ever when that is too far (see idle_expiry).
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
