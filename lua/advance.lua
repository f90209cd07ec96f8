-- Raises a token counter so the next grant is above a floor.
-- KEYS[1]: token counter key
-- ARGV[1]: floor, a digit string without leading zeros, below 2^63-1
-- Returns the counter's value afterwards, as a string.
local c = read_counter(KEYS[1])
if type(c) == 'table' then
  return c
end
local floor = ARGV[1]
if not c then
  -- a missing counter is seeded as on acquire, and never below the floor
  c = clock_seed()
  if less(c, floor) then
    c = floor
  end
  redis.call('SET', KEYS[1], c)
elseif less(c, floor) then
  c = floor
  redis.call('SET', KEYS[1], c)
end
return c
