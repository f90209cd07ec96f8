-- Grants a lock and its fencing token in one atomic step.
-- KEYS[1]: lock key, KEYS[2]: token counter key,
-- KEYS[3]: this attempt's abandon marker (all three in one hash slot)
-- ARGV[1]: owner nonce followed by ':', ARGV[2]: TTL in milliseconds
-- The lock key holds the owner nonce, ':', and the token in decimal.
--
-- Returns {1, token} when granted, {0, pttl} when another owner holds the
-- lock, {0, -3} when the attempt was abandoned. A run for an owner that
-- already holds the lock returns its grant again, unchanged: a client that
-- lost the reply and sent the command again gets the lock it was granted
-- instead of waiting for it to expire. A run arriving after its client
-- gave up on it (the marker the client's cleanup left) grants nothing.
--
-- The token is INCR of the counter after raising the counter to the
-- server clock in microseconds when it is missing or behind it. A counter
-- that is lost, or that lags because a replica promoted in a failover
-- missed INCRs, so does not grant a token again, as long as the servers'
-- clocks do not step back.
--
-- The counter is raised, and the lock set with NX PX, only when the lock
-- key is free; everything is checked before anything is written, so an
-- error leaves neither a lock nor a raised counter.
local held = redis.call('GET', KEYS[1])
if held then
  if string.sub(held, 1, #ARGV[1]) == ARGV[1] then
    return {1, string.sub(held, #ARGV[1] + 1)}
  end
  return {0, redis.call('PTTL', KEYS[1])}
end
if redis.call('EXISTS', KEYS[3]) == 1 then
  return {0, -3}
end
local c = read_counter(KEYS[2])
if type(c) == 'table' then
  return c
end
local now = clock_seed()
if not c or less(c, now) then
  redis.call('SET', KEYS[2], now)
end
local t = redis.call('INCR', KEYS[2])
if t < 9007199254740992 then
  t = string.format('%d', t)
else
  -- beyond 2^53 a Lua number is not exact: use the stored digits
  t = redis.call('GET', KEYS[2])
end
redis.call('SET', KEYS[1], ARGV[1] .. t, 'NX', 'PX', ARGV[2])
return {1, t}
