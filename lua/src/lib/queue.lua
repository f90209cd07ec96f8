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
