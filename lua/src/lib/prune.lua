-- Removal of the places of dead waiters from the queue (see queue) while
-- the lock is held.
--@requires clock live queue

-- How many entries from the front of the queue a refused attempt looks
-- at for dead ones (see prune).
local prune_span = 16

-- Removes the dead and malformed entries among the first prune_span of
-- the queue, but for keep (the caller's own entry, which its attempt
-- renews). While the lock stays held, no release and no attempt on a
-- free lock walks the queue (queue_head), so the refused attempts of the
-- waiters still alive remove the places of those whose processes died.
-- It reads both keys, keep's deadline too, before it writes anything, so
-- a key of another type raises before the caller's enqueue writes.
local function prune(queue, deadlines, keep)
  local entries = redis.call('ZRANGE', queue, 0, prune_span - 1)
  local n = #entries
  entries[n + 1] = keep
  local ds = redis.call('HMGET', deadlines, unpack(entries))
  local dead = {}
  for i = 1, n do
    if entries[i] ~= keep and not live(entries[i], ds[i]) then
      dead[#dead + 1] = entries[i]
    end
  end
  if #dead > 0 then
    redis.call('HDEL', deadlines, unpack(dead))
    redis.call('ZREM', queue, unpack(dead))
  end
end
