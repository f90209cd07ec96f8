-- The queue of waiters, in two keys: the queue, a sorted set of entries
-- scored by arrival (server clock, microseconds), and its deadlines, a
-- hash from entry to the server time in milliseconds after which the
-- entry is dead.
-- An entry is a waiter's owner nonce, ':', and the TTL in milliseconds it
-- asked for. A waiter renews its deadline while it waits; a waiter that
-- stops renewing (its process died) is skipped once its deadline passes.
--@requires clock live

-- Removes an entry from the queue at queue (its order) and deadlines:
-- the deadline first, so that a deadlines key of another type raises
-- before anything is written.
local function dequeue(queue, deadlines, entry)
  redis.call('HDEL', deadlines, entry)
  redis.call('ZREM', queue, entry)
end

-- Returns the first live entry of the queue, its owner and its TTL,
-- removing dead and malformed entries before it; nil when there is none.
local function queue_head(queue, deadlines)
  while true do
    local entry = redis.call('ZRANGE', queue, 0, 0)[1]
    if not entry then
      return nil
    end
    local owner, ttl = live(entry, redis.call('HGET', deadlines, entry))
    if owner then
      return entry, owner, ttl
    end
    dequeue(queue, deadlines, entry)
  end
end

-- Puts entry at the back of the queue, or leaves it where it is, and sets
-- its deadline life milliseconds from now. The queue's keys live at least
-- as long as their longest-lived entry, and at most twice the longest
-- life enqueued: when the order has less than life left, both keys get
-- twice life. The two are given the same expiry and hold the same
-- entries, so they are made and emptied together, and a renewal (its
-- entry already in both) reads only the order's expiry. A new deadline
-- may have made the deadlines' key afresh (should it have been deleted
-- or evicted alone), so then its expiry is read too, and brought up to
-- the order's: neither key is ever left without one.
local function enqueue(queue, deadlines, entry, life)
  redis.call('ZADD', queue, 'NX', clock_seed(), entry)
  local added = redis.call('HSET', deadlines, entry, now_ms() + life)
  local left = redis.call('PTTL', queue)
  if left < life then
    local px = string.format('%d', 2 * life)
    redis.call('PEXPIRE', queue, px)
    redis.call('PEXPIRE', deadlines, px)
  elseif added == 1 and redis.call('PTTL', deadlines) < left then
    redis.call('PEXPIRE', deadlines, string.format('%d', left))
  end
end

-- Whether r, the pcall reply of a publish, is a refusal: an error other
-- than that of a command the server does not have (SPUBLISH before 7).
local function refusal(r)
  return type(r) == 'table' and r.err ~= nil and
    not string.find(string.lower(r.err), 'unknown', 1, true)
end

-- Tells the subscribers of channel ch, one Locker's, subscribed while it
-- has a waiter queued. kind is what the releasing Locker learnt: with
-- 'sharded' or '' (not known yet) SPUBLISH first, with 'classic' PUBLISH
-- first; when the first reaches nobody, or fails, the other one too, as
-- the waiting Locker may have learnt the other kind (Lockers that
-- started before and after a failover to a server of another version).
-- (A node of a cluster counts only its own subscribers: a classic
-- PUBLISH heard on another node counts 0 here, and costs one SPUBLISH
-- more.)
-- With 'replicas' (a client that subscribes on replicas, whose
-- subscribers a primary's SPUBLISH leaves out of its count) SPUBLISH, and
-- PUBLISH only should it fail. Returns whether the message was taken: a
-- refusal (an ACL without the channel or the command) fails nothing, as
-- it comes after the script's writes, which Redis does not roll back;
-- the waiter's own timer then finds the grant.
local function publish(ch, msg, kind)
  local first, other = 'SPUBLISH', 'PUBLISH'
  if kind == 'classic' then
    first, other = 'PUBLISH', 'SPUBLISH'
  end
  local r = redis.pcall(first, ch, msg)
  if type(r) == 'number' and (r > 0 or kind == 'replicas') then
    return true
  end
  local r2 = redis.pcall(other, ch, msg)
  if type(r2) == 'number' and r2 > 0 then
    return true
  end
  if refusal(r) or refusal(r2) then
    return false
  end
  return type(r) == 'number' or type(r2) == 'number'
end
