-- Whether a queue entry (see queue) is a live waiter's place.
--@requires clock

-- Returns the owner and the TTL of entry when it is well formed and
-- alive: deadline, its deadline as the deadlines' hash answered it (false
-- when missing), is after now; nil when the entry is dead or malformed.
local function live(entry, deadline)
  deadline = tonumber(deadline)
  local owner, ttl = string.match(entry, '^(.*:)([1-9]%d*)$')
  if owner and deadline and deadline > now_ms() then
    return owner, ttl
  end
  return nil
end
