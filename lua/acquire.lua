-- Grants a lock and its fencing token in one atomic step.
-- KEYS[1]: lock key, KEYS[2]: token counter key, KEYS[3], KEYS[4]: the
-- queue of waiters, KEYS[5]: this attempt's abandon marker (all in one
-- hash slot)
-- ARGV[1]: owner nonce followed by ':', ARGV[2]: TTL in milliseconds,
-- ARGV[3]: '' for a single attempt; for a waiter, the life in
-- milliseconds of its place in the queue
-- ARGV[4]: the idle expiry in milliseconds (0: none) of the counter
-- The lock key holds the owner nonce, ':', and the token in decimal.
--
-- Returns {GRANTED (1), token} when granted; {REFUSED (0), ms, floor}
-- when not, where ms is how long until the lock may be free (the holder's
-- PTTL, or the remaining life of the waiter ahead in the queue) and floor
-- the token counter's value before this run (every grant made before it
-- has a token at or below it); {ABANDONED (2)} when the attempt was
-- abandoned: its caller gave up on it before it arrived.
--
-- A run for an owner that already holds the lock returns its grant again
-- with its TTL renewed: a client that lost the reply and sent the command
-- again, or a waiter the lock was handed to by a release, gets the lock it
-- was granted instead of waiting for it to expire. A run arriving after
-- its client gave up on it (the marker the client's cleanup left) grants
-- nothing and queues nothing.
--
-- A free lock goes to the first live waiter in the queue: a run that is
-- not that waiter is refused, and a waiter's run takes (or keeps) its
-- place in the queue. Everything is checked before anything is written,
-- so an error leaves neither a lock nor a raised counter.
local waiting = ARGV[3] ~= ''
local entry = ARGV[1] .. ARGV[2]
local GRANTED, REFUSED, ABANDONED = 1, 0, 2

-- Refuses the attempt; a waiter takes or keeps its place in the queue.
local function refuse(ms)
  local floor = redis.pcall('GET', KEYS[2])
  if waiting then
    enqueue(KEYS[3], KEYS[4], entry, tonumber(ARGV[3]))
  end
  return {REFUSED, ms, floor}
end

if present == 0 then
  -- Free, nobody queued, no marker, and a counter that acquire_free.lua
  -- left to this part: ahead of the clock, or unusable.
  local t = grant(KEYS[1], KEYS[2], ARGV[1], ARGV[2], tonumber(ARGV[4]))
  if type(t) == 'table' then
    return t
  end
  return {GRANTED, t}
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
    return {GRANTED, string.sub(held, #ARGV[1] + 1)}
  end
  return refuse(redis.call('PTTL', KEYS[1]))
end
-- The lock is free, and the queue has waiters: the first live one gets it.
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
return {GRANTED, t}
