-- inspect: reads what a resource's keys hold, writing nothing.
--
-- KEYS[1]  the lock key
-- KEYS[2]  the token counter
-- KEYS[3]  the queue of waiters: its deadlines, a hash from entry to
--          the server time in milliseconds after which it is dead
--
-- Replies:
--   {lock, pttl, waiters, counter}   lock is the lock key's value (the
--                                    holder's nonce, ':' and its token),
--                                    false when free; pttl its PTTL
--                                    (negative when free); waiters how
--                                    many queue entries are alive (well
--                                    formed, their deadline ahead of the
--                                    server clock: see live);
--                                    counter the counter's value,
--                                    false when missing
--   an error reply                   WRONGTYPE when a key is of another
--                                    type
--@include clock live

local lock = redis.call('GET', KEYS[1])
local pttl = redis.call('PTTL', KEYS[1])
local counter = redis.call('GET', KEYS[2])
local waiters = 0
local d = redis.call('HGETALL', KEYS[3])
for i = 2, #d, 2 do
  if live(d[i - 1], d[i]) then
    waiters = waiters + 1
  end
end
return {lock, pttl, waiters, counter}
