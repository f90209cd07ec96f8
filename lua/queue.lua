-- Shared prelude of the scripts that keep the queue of waiters.
-- KEYS[3]: queue, a sorted set of entries scored by arrival (server clock,
-- microseconds); KEYS[4]: deadlines, a hash from entry to the server time
-- in milliseconds after which the entry is dead.
-- An entry is a waiter's owner nonce, ':', and the TTL in milliseconds it
-- asked for. A waiter renews its deadline while it waits; a waiter that
-- stops renewing (its process died) is skipped once its deadline passes.

-- Removes an entry from the queue.
local function dequeue(entry)
  redis.call('ZREM', KEYS[3], entry)
  redis.call('HDEL', KEYS[4], entry)
end

-- Returns the first live entry of the queue, its owner and its TTL,
-- removing dead and malformed entries before it; nil when there is none.
local function queue_head()
  while true do
    local entry = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
    if not entry then
      return nil
    end
    local deadline = tonumber(redis.call('HGET', KEYS[4], entry))
    local owner, ttl = string.match(entry, '^(.*:)([1-9]%d*)$')
    if owner and deadline and deadline > now_ms() then
      return entry, owner, ttl
    end
    dequeue(entry)
  end
end

-- Puts entry at the back of the queue, or leaves it where it is, and sets
-- its deadline life milliseconds from now. The queue's keys live at least
-- as long as their longest-lived entry.
local function enqueue(entry, life)
  redis.call('ZADD', KEYS[3], 'NX', clock_seed(), entry)
  redis.call('HSET', KEYS[4], entry, now_ms() + life)
  for k = 3, 4 do
    if redis.call('PTTL', KEYS[k]) < life then
      redis.call('PEXPIRE', KEYS[k], life)
    end
  end
end

-- Tells subscribers on channel ch: sharded pub/sub where the server has it
-- (Redis 7 and later), classic pub/sub otherwise.
local function publish(ch, msg)
  local r = redis.pcall('SPUBLISH', ch, msg)
  if type(r) == 'table' and r.err then
    redis.call('PUBLISH', ch, msg)
  end
end
