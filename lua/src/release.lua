-- release: releases a lock, handing it to the first live waiter in the
-- queue, or straight to the releasing Locker's own next waiter.
--
-- KEYS[1]  the lock key
-- KEYS[2]  the token counter
-- KEYS[3]  the queue of waiters: its order
-- KEYS[4]  the queue of waiters: its deadlines
-- KEYS[5]  with ARGV[4], the caller's abandon marker; with ARGV[6], the
--          candidate's; absent when neither is given (never both are)
-- ARGV[1]  the owner nonce followed by ':'; its first 16 characters are
--          its Locker's id
-- ARGV[2]  the resource's channels' common start: the Locker whose waiter
--          is handed the lock hears of it on this, followed by its id
-- ARGV[3]  the caller's own queue entry to remove, or ''
-- ARGV[4]  the marker's TTL in milliseconds, or ''
-- ARGV[5]  the idle expiry in milliseconds (0: none) of the counter
-- ARGV[6]  the entry of the caller's Locker's next waiter for the
--          resource (its candidate), or ''
-- ARGV[7]  the life in milliseconds of the candidate's place, should it
--          be queued: given with a candidate, '' without one
-- ARGV[8]  how to publish (see lib/publish.lua): 'classic' when
--          the server is known to lack sharded pub/sub; else 'replicas'
--          when the Locker may subscribe on replicas; else 'sharded' when
--          the server has sharded pub/sub (SPUBLISH), '' when not known
--
-- Replies:
--   HELD (1)                            the caller held the lock, and
--                                       it is deleted (an integer, not
--                                       an array: cheaper to read)
--   NOT_HELD (0)                        the caller did not hold it: the
--                                       lock is free, or another's,
--                                       which stays
--   {held, owner, token, told, queued}  the lock was handed to the
--                                       waiter owner (its nonce and ':')
--                                       with token (a digit string):
--                                       held is HELD or NOT_HELD, as
--                                       above; told is PUBLISHED (1) or
--                                       UNPUBLISHED (0) for a waiter
--                                       queued in Redis (UNPUBLISHED: Redis
--                                       refused the message, the hand-over
--                                       stands all the same), IN_REPLY (2)
--                                       for the candidate when nobody was
--                                       queued, which hears of it in this
--                                       reply alone;
--                                       queued is QUEUED (1) when the
--                                       candidate took its place at the
--                                       back of the queue, else 0
--   an error reply                      WRONGTYPE when a key of the
--                                       queue is of another type
--
-- A waiter that gives up runs it with its entry: it leaves the queue, and
-- a lock handed to it meanwhile goes on to the next waiter. A client that
-- lost the reply to an acquire runs it with the attempt's marker, which
-- makes the acquire script refuse any copy of the attempt still on its way;
-- and so does the cleanup of a candidate that left while the reply of the
-- release it was promised to was lost: that release, should it arrive
-- after the cleanup, gives the candidate nothing.
--
-- When the caller holds the lock, it goes to the first live waiter queued
-- with a fresh token, as the acquire script would grant it; with nobody
-- queued, to the candidate, which the caller's Locker holds back from
-- Redis while the lock is its own. The candidate takes its place at the
-- back of the queue when another waiter gets the lock: processes take
-- turns, and the candidate makes no attempt of its own. A waiter queued
-- in Redis hears of its grant by "<owner nonce>:<token>" published on its
-- Locker's channel alone, even a waiter of the caller's Locker: the reply
-- may be lost, and then the caller's Locker hears of it no other way; so
-- it does, too, when the lock is free (a waiter gives up, or a holder
-- releases late). A counter that cannot grant a token hands nothing on:
-- the waiter's own attempt reports it.
local HELD, NOT_HELD = 1, 0
local UNPUBLISHED, PUBLISHED, IN_REPLY = 0, 1, 2
local QUEUED = 1

-- What the fast path read before it fell through, which the rest reuses
-- instead of asking Redis again: the lock's value (nil: not read, or the
-- read failed, and the rest reads it again with get, which answers a key
-- of another type and raises any other error), and how many of the queue
-- and the candidate's abandon marker exist (nil: not asked).
local read_lock, queue_or_marker

-- The fast path: the common cases, the caller's own lock released by its
-- holder (no queue entry to remove, no marker to set) with nobody queued:
-- with no candidate, it is deleted; with a candidate, a well-formed entry
-- of the caller's Locker that has not left, it is handed to it, when the
-- counter is missing or behind the server clock, in one call that finds
-- the queue and the candidate's abandon marker both absent. It runs
-- before the helpers below are defined, so these cases pay for none of
-- them, and it reads everything before it writes. Any other case falls
-- through, with nothing written, to the rest of the script, which
-- decides every case, these too; a refused read of the lock or the
-- counter (another type, an ACL refusal) too, which the rest reports.
-- Its EXISTS and TIME raise as the rest's would: the ACL rule of
-- docs/redis.md grants every command the scripts run, and under a rule
-- that lacks one the two paths may fail apart.
--@fast
if ARGV[3] == '' and ARGV[4] == '' then
  local v = redis.pcall('GET', KEYS[1])
  if type(v) ~= 'table' then
    read_lock = v
  end
  if type(v) == 'string' and string.sub(v, 1, #ARGV[1]) == ARGV[1] then
    if ARGV[6] == '' then
      if redis.call('EXISTS', KEYS[3]) == 0 then
        redis.call('DEL', KEYS[1])
        return HELD
      end
    else
      queue_or_marker = redis.call('EXISTS', KEYS[3], KEYS[5])
      if queue_or_marker == 0 then
        local owner, ttl = string.match(ARGV[6], '^(.*:)([1-9]%d*)$')
        local c = redis.pcall('GET', KEYS[2])
        local clock = redis.call('TIME')
        local seed = clock[1] .. string.format('%06d', tonumber(clock[2]))
        -- the candidate of the caller's Locker, and a missing counter, or
        -- one of fewer digits than the seed, or of as many and below it,
        -- with no leading zero (a valid counter)
        if owner and string.sub(owner, 1, 16) == string.sub(ARGV[1], 1, 16) and
            (not c or (type(c) == 'string' and string.match(c, '^[1-9]%d*$') and
            (#c < #seed or (#c == #seed and c < seed)))) then
          -- the seed is below 2^53, so exact as a Lua number
          local t = string.format('%d', tonumber(seed) + 1)
          if ARGV[5] == '0' then
            redis.call('SET', KEYS[2], t)
          else
            redis.call('SET', KEYS[2], t, 'PX', tonumber(ttl) + tonumber(ARGV[5]))
          end
          redis.call('SET', KEYS[1], owner .. t, 'PX', ttl)
          return {HELD, owner, t, IN_REPLY, 0}
        end
      end
    end
  end
end
--@end
--@include get clock idle counter live queue publish

-- The whole decision, for every case. The lock is read first: a read
-- refused raises before anything is written.
local v = read_lock
if v == nil then
  v = get(KEYS[1])
end
-- The marker first: should a queue key be of another type, the attempt
-- it refuses is refused all the same.
if ARGV[4] ~= '' then
  redis.call('SET', KEYS[5], '1', 'PX', ARGV[4])
end
if ARGV[3] ~= '' then
  dequeue(KEYS[3], KEYS[4], ARGV[3])
end
local held = NOT_HELD
if type(v) == 'string' and string.sub(v, 1, #ARGV[1]) == ARGV[1] then
  held = HELD
elseif v then
  -- another owner's lock, or a key of another type: left as it is
  return NOT_HELD
end
local locker = string.sub(ARGV[1], 1, 16)
local candidate = ARGV[6]
-- Whether the candidate left, and its cleanup has run (its marker
-- exists): then nothing is for it. nil until known.
local left
if candidate ~= '' then
  if queue_or_marker == nil then
    left = redis.call('EXISTS', KEYS[5]) == 1
  elseif queue_or_marker ~= 1 then
    left = queue_or_marker == 2
  end
end
local head, owner, ttl = queue_head(KEYS[3], KEYS[4])
local queued_head = head ~= nil
if candidate ~= '' and left == nil then
  -- one of the queue and the marker existed: the queue, if it has a
  -- live head now (its dead entries are gone, and perhaps all of it)
  left = not queued_head and redis.call('EXISTS', KEYS[5]) == 1
end
if left then
  candidate = ''
end
if not head and held == HELD and candidate ~= '' then
  -- nobody queued: the caller's own next waiter
  head = candidate
  owner, ttl = string.match(candidate, '^(.*:)([1-9]%d*)$')
end
if head and owner then
  local t = grant(KEYS[1], KEYS[2], owner, ttl, tonumber(ARGV[5]))
  if type(t) ~= 'table' then
    if queued_head then
      dequeue(KEYS[3], KEYS[4], head)
    end
    local told = IN_REPLY
    if queued_head or string.sub(owner, 1, 16) ~= locker then
      told = UNPUBLISHED
      if publish(ARGV[2] .. string.sub(owner, 1, 16), owner .. t, ARGV[8]) then
        told = PUBLISHED
      end
    end
    local queued = 0
    if held == HELD and candidate ~= '' and candidate ~= head then
      enqueue(KEYS[3], KEYS[4], candidate, tonumber(ARGV[7]))
      queued = QUEUED
    end
    return {held, owner, t, told, queued}
  end
end
if held == HELD then
  redis.call('DEL', KEYS[1])
end
return held
