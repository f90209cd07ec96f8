-- Deletes a lock if it still belongs to the caller.
-- KEYS[1]: lock key; ARGV[1]: owner nonce followed by ':'
-- Returns 1 when deleted, 0 when the key is gone or not the caller's.
if owned() then
  return redis.call('DEL', KEYS[1])
end
return 0
