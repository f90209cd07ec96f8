-- acquire: grants a lock and its fencing token in one atomic step.
--
-- KEYS[1]  the lock key: the owner nonce, ':' and the token in decimal
-- KEYS[2]  the token counter
-- KEYS[3]  the queue of waiters: its order
-- KEYS[4]  the queue of waiters: its deadlines
-- KEYS[5]  this attempt's abandon marker
--          (all five in one hash slot)
-- ARGV[1]  the owner nonce followed by ':'
-- ARGV[2]  the TTL in milliseconds
-- ARGV[3]  '' for a single attempt; for a waiter, the life in
--          milliseconds of its place in the queue
-- ARGV[4]  the idle expiry in milliseconds (0: none) of the counter
--
-- Replies:
--   token                     the lock is the caller's, with token: an
--                             integer below 2^53 (a Lua number holds it
--                             exactly), above, a digit string; alone,
--                             not in an array, the cheapest reply for
--                             the client to read (a lock value that
--                             holds something else after the caller's
--                             owner, which another client wrote,
--                             answers it the same way: digits below
--                             2^53 ("0" too) as an integer, the rest as
--                             a string; the caller takes what parses as
--                             a token, "007" as 7, and refuses the rest)
--   {REFUSED (0), ms, floor}  the lock is another's, or promised to a
--                             waiter ahead: ms is how long until it may
--                             be free (the holder's PTTL, or the
--                             remaining life of the waiter ahead), floor
--                             the token counter's value before this run
--                             (every grant made before it has a token at
--                             or below it); floor is left out when the
--                             counter is missing or of another type
--   {ABANDONED (2)}           the attempt's caller gave up on it before
--                             it arrived (the marker its cleanup left):
--                             nothing is granted or queued
--   an error reply            FENCEDLOCK_CORRUPT when the counter is
--                             unusable, WRONGTYPE when a key is of
--                             another type: no lock, no counter written
--
-- A run for an owner that already holds the lock returns its grant again
-- with its TTL renewed: a client that lost the reply and sent the command
-- again, or a waiter the lock was handed to by a release, gets the lock it
-- was granted instead of waiting for it to expire.
--
-- A free lock goes to the first live waiter in the queue: a run that is
-- not that waiter is refused, and a waiter's run takes (or keeps) its
-- place in the queue. A waiter's run refused by a held lock also removes
-- the places of dead waiters near the front of the queue (prune). The
-- counter is checked before the lock is written, so an error leaves
-- neither a lock nor a raised counter.
local REFUSED, ABANDONED = 0, 2

-- The fast path: the common case, a free lock with nobody queued and no
-- marker, and a counter that is missing or behind the server clock. It
-- runs before the helpers below are defined, so this case pays for none
-- of them, and it reads everything before it writes. Any other case
-- falls through, with nothing written, to the rest of the script, which
-- decides every case, this one too, by the same rules (next_token); a
-- refused read of the counter (another type, an ACL refusal) too, which
-- the rest reports. Its EXISTS and TIME raise as the rest's would: the
-- ACL rule of docs/redis.md grants every command the scripts run, and
-- under a rule that lacks one the two paths may fail apart.
--@fast
if redis.call('EXISTS', KEYS[1], KEYS[3], KEYS[5]) == 0 then
  local c = redis.pcall('GET', KEYS[2])
  local clock = redis.call('TIME')
  local seed = clock[1] .. string.format('%06d', tonumber(clock[2]))
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
    return tonumber(t)
  end
end
--@end
--@include get clock idle counter live queue prune

-- The whole decision, for every case.

-- The reply of a grant with token t (a digit string): an integer below
-- 2^53, else the string; so is anything else a lock value holds after its
-- owner (a value another client wrote), which the caller then refuses.
local function granted(t)
  if digits(t) and less(t, '9007199254740992') then
    return tonumber(t)
  end
  return t
end

local waiting = ARGV[3] ~= ''
local entry = ARGV[1] .. ARGV[2]

-- Refuses the attempt for ms milliseconds; a waiter takes or keeps its
-- place in the queue.
local function refuse(ms)
  local floor = get(KEYS[2])
  if type(floor) ~= 'string' then
    floor = nil
  end
  if waiting then
    enqueue(KEYS[3], KEYS[4], entry, tonumber(ARGV[3]))
  end
  return {REFUSED, ms, floor}
end

if redis.call('EXISTS', KEYS[5]) == 1 then
  return {ABANDONED}
end
local held = redis.call('GET', KEYS[1])
if held then
  if string.sub(held, 1, #ARGV[1]) == ARGV[1] then
    -- its own grant (a resent attempt, or a hand-over it has not heard
    -- of): renewed, with its counter
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    extend_idle(KEYS[2], tonumber(ARGV[2]), tonumber(ARGV[4]))
    return granted(string.sub(held, #ARGV[1] + 1))
  end
  if waiting then
    prune(KEYS[3], KEYS[4], entry)
  end
  return refuse(redis.call('PTTL', KEYS[1]))
end
-- The lock is free: the first live waiter in the queue gets it.
local head = queue_head(KEYS[3], KEYS[4])
if head and head ~= entry then
  return refuse(tonumber(redis.call('HGET', KEYS[4], head)) - now_ms())
end
local t = grant(KEYS[1], KEYS[2], ARGV[1], ARGV[2], tonumber(ARGV[4]))
if type(t) == 'table' then
  return t
end
if head then
  dequeue(KEYS[3], KEYS[4], entry)
end
return granted(t)
