-- Whether the lock key holds a value of owner (its nonce followed by
-- ':'). A missing key, another owner's value and a key of another type
-- all say no.
--@requires get
local function owned(lock_key, owner)
  local v = get(lock_key)
  return type(v) == 'string' and string.sub(v, 1, #owner) == owner
end
