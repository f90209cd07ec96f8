-- release: releases a lock, handing it to the first live waiter in the
-- queue.
--
-- KEYS[1]  the lock key
-- KEYS[2]  the token counter
-- KEYS[3]  the queue of waiters: its order
-- KEYS[4]  the queue of waiters: its deadlines
-- KEYS[5]  an abandon marker, or ''
-- ARGV[1]  the owner nonce followed by ':'
-- ARGV[2]  the resource's channel
-- ARGV[3]  the caller's own queue entry to remove, or ''
-- ARGV[4]  the marker's TTL in milliseconds, or ''
-- ARGV[5]  the idle expiry in milliseconds (0: none) of the counter
--
-- Replies:
--   {HELD (1)}                          the caller held the lock, and
--                                       it is deleted
--   {NOT_HELD (0)}                      the caller did not hold it: the
--                                       lock is free, or another's,
--                                       which stays
--   {held, owner, token, published}     the lock was handed to the
--                                       waiter owner (its nonce and ':')
--                                       with token (a digit string):
--                                       held is HELD or NOT_HELD, as
--                                       above; published is PUBLISHED
--                                       (1), or UNPUBLISHED (0) when
--                                       Redis refused the message (the
--                                       hand-over stands all the same)
--   an error reply                      WRONGTYPE when a key of the
--                                       queue is of another type
--
-- A waiter that gives up runs it with its entry: it leaves the queue, and
-- a lock handed to it meanwhile goes on to the next waiter. A client that
-- lost the reply to an acquire runs it with the attempt's marker, which
-- makes the acquire script refuse any copy of the attempt still on its way.
--
-- When the caller holds the lock and a waiter is queued, the lock is
-- granted to that waiter with a fresh token, as the acquire script would,
-- and "<owner nonce>:<token>" is published on the channel. So it is, too,
-- when the lock is free (a waiter gives up, or a holder releases late):
-- the first waiter need not wait for its timer. A counter that cannot
-- grant a token hands nothing on: the waiter's own attempt reports it.
local HELD, NOT_HELD = 1, 0
local PUBLISHED, UNPUBLISHED = 1, 0

-- The fast path: the common case, the caller's own lock with nobody
-- queued, released by its holder (no queue entry to remove, no marker to
-- set). It runs before the helpers below are defined, so this case pays
-- for none of them. Any other case falls through, with nothing written,
-- to the rest of the script, which decides every case, this one too; an
-- error of the lock's read (another type, an ACL refusal) too, which the
-- rest reports.
--@fast
if ARGV[3] == '' and ARGV[4] == '' then
  local v = redis.pcall('GET', KEYS[1])
  if type(v) == 'string' and string.sub(v, 1, #ARGV[1]) == ARGV[1] and
      redis.call('EXISTS', KEYS[3]) == 0 then
    redis.call('DEL', KEYS[1])
    return {HELD}
  end
end
--@end
--@include get clock idle counter queue

-- The whole decision, for every case. The lock is read first: a read
-- refused raises before anything is written.
local v = get(KEYS[1])
if ARGV[3] ~= '' then
  dequeue(KEYS[3], KEYS[4], ARGV[3])
end
if ARGV[4] ~= '' then
  redis.call('SET', KEYS[5], '1', 'PX', ARGV[4])
end
local held = NOT_HELD
if type(v) == 'string' and string.sub(v, 1, #ARGV[1]) == ARGV[1] then
  held = HELD
elseif v then
  -- another owner's lock, or a key of another type: left as it is
  return {NOT_HELD}
end
local head, owner, ttl = queue_head(KEYS[3], KEYS[4])
if head then
  local t = grant(KEYS[1], KEYS[2], owner, ttl, tonumber(ARGV[5]))
  if type(t) ~= 'table' then
    dequeue(KEYS[3], KEYS[4], head)
    local published = UNPUBLISHED
    if publish(ARGV[2], owner .. t) then
      published = PUBLISHED
    end
    return {held, owner, t, published}
  end
end
if held == HELD then
  redis.call('DEL', KEYS[1])
end
return {held}
