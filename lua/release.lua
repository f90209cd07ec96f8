-- Releases a lock, handing it to the first live waiter in the queue.
-- KEYS[1]: lock key, KEYS[2]: token counter key, KEYS[3], KEYS[4]: the
-- queue of waiters, KEYS[5]: an abandon marker or ''
-- ARGV[1]: owner nonce followed by ':', ARGV[2]: the resource's channel,
-- ARGV[3]: the caller's own queue entry to remove, or '',
-- ARGV[4]: the marker's TTL in milliseconds, or ''
-- ARGV[5]: the idle expiry in milliseconds (0: none) of the counter
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
-- the first waiter need not wait for its timer.
--
-- Returns {HELD (1) or NOT_HELD (0)}, or {HELD or NOT_HELD, owner, token,
-- PUBLISHED (1) or UNPUBLISHED (0)} when the lock was handed to the waiter
-- owner with token. HELD says the caller held the lock (and no longer
-- does); UNPUBLISHED, that Redis refused the message (the hand-over
-- stands all the same).
local HELD, NOT_HELD = 1, 0

if ARGV[3] ~= '' then
  dequeue(KEYS[3], KEYS[4], ARGV[3])
end
if ARGV[4] ~= '' then
  redis.call('SET', KEYS[5], '1', 'PX', ARGV[4])
end
local v = redis.pcall('GET', KEYS[1])
local held = NOT_HELD
if type(v) == 'string' and string.sub(v, 1, #ARGV[1]) == ARGV[1] then
  held = HELD
elseif v then
  -- another owner's lock
  return {NOT_HELD}
end
local head, owner, ttl = queue_head(KEYS[3], KEYS[4])
if head then
  local t = grant(KEYS[1], KEYS[2], owner, ttl, tonumber(ARGV[5]))
  -- an unusable counter hands nothing on: the waiter's own attempt
  -- reports it
  if type(t) ~= 'table' then
    dequeue(KEYS[3], KEYS[4], head)
    local published = 0
    if publish(ARGV[2], owner .. t) then
      published = 1
    end
    return {held, owner, t, published}
  end
end
if held == HELD then
  redis.call('DEL', KEYS[1])
end
return {held}
