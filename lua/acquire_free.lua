-- The first part of the acquire script (acquire.lua documents its keys,
-- arguments and replies): the common case, a free lock with nobody
-- queued and no marker, and a counter that is missing or behind the
-- server clock. It runs before the shared preludes are defined, so this
-- case pays for none of them, and it reads everything before it writes:
-- any other case falls through, with nothing written, to the full script
-- below, which decides it by the same rules (counter.lua's next_token).
-- present: how many of the lock, the queue and the marker exist, which
-- the full script reads too.
local present = redis.call('EXISTS', KEYS[1], KEYS[3], KEYS[5])
if present == 0 then
  local c = redis.pcall('GET', KEYS[2])
  local now = redis.call('TIME')
  local seed = now[1] .. string.format('%06d', tonumber(now[2]))
  -- a missing counter, or one of fewer digits than the seed, or of as
  -- many and below it, with no leading zero (a valid counter)
  if not c or (type(c) == 'string' and string.match(c, '^[1-9]%d*$') and
      (#c < #seed or (#c == #seed and c < seed))) then
    -- the seed is below 2^53, so exact as a Lua number
    local t = string.format('%d', tonumber(seed) + 1)
    if ARGV[4] == '0' then
      redis.call('SET', KEYS[2], t)
    else
      redis.call('SET', KEYS[2], t, 'PX', tonumber(ARGV[2]) + tonumber(ARGV[4]))
    end
    redis.call('SET', KEYS[1], ARGV[1] .. t, 'PX', ARGV[2])
    return {1, t}
  end
end
