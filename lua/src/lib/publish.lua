-- Publishing a hand-over to the waiting Locker.

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
