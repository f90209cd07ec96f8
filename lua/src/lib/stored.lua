-- The value key of a RedisStore resource, a hash: field t = the token
-- that wrote the value, field v = the value, field f = the fence, the
-- highest token that wrote or fenced the resource (a hash written before
-- fences existed has no f: its fence is t). A hash with f alone was
-- fenced and never written.
--
-- Tokens are compared as digit strings, never as Lua numbers, which are
-- doubles and exact only up to 2^53.

-- Whether digit string a < digit string b (both canonical: no leading
-- zero).
local function below(a, b)
  if #a ~= #b then
    return #a < #b
  end
  return a < b
end

-- Whether s is a token as the store writes one: 1 to 2^64-1 in decimal,
-- no leading zero.
local function canonical(s)
  return string.match(s, '^[1-9]%d*$') and (#s < 20 or
    (#s == 20 and s <= '18446744073709551615'))
end

-- Returns the fence of the value key: the higher of fields t and f, as a
-- digit string, or nil when nothing wrote or fenced it; or an error reply
-- (a table) when either field holds what the store did not write.
local function read_fence(key)
  local stored = redis.call('HMGET', key, 't', 'f')
  local fence
  for i = 1, 2 do
    local s = stored[i]
    if s then
      if not canonical(s) then
        return redis.error_reply('FENCEDLOCK_CORRUPT value key ' .. key ..
          ' holds a token that is not an integer from 1 to 2^64-1')
      end
      if not fence or below(fence, s) then
        fence = s
      end
    end
  end
  return fence
end
