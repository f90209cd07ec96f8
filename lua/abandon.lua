-- Gives up an acquire attempt whose reply never arrived.
-- KEYS[1]: lock key, KEYS[2]: the attempt's abandon marker
-- ARGV[1]: owner nonce followed by ':', ARGV[2]: marker TTL in milliseconds
-- Deletes the lock if the attempt was granted, and in any case sets the
-- marker: a copy of the attempt may still be on its way (delayed in the
-- network, or sent again by the client), and the acquire script refuses it
-- when it arrives. Returns 1 when a lock was deleted, 0 otherwise.
local deleted = 0
if owned() then
  deleted = redis.call('DEL', KEYS[1])
end
redis.call('SET', KEYS[2], '1', 'PX', ARGV[2])
return deleted
