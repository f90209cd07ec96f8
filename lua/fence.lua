-- Raises the fence of a value key to a token (see stored.lua), unless
-- the fence is higher. With ARGV[2] = 'read' it also returns the value
-- and the token that wrote it: the fenced read of Update.
-- KEYS[1]: value key
-- ARGV[1]: token, a decimal digit string from 1 to 2^64-1, no leading zero
-- ARGV[2]: 'read' or ''
-- Returns {FENCED (1)}, or {FENCED, value token, value} for a read (each
-- false when nothing was written), when the token is at or above the
-- fence; {STALE (0), fence} when it is below, having written nothing.
local FENCED, STALE = 1, 0
local fence = read_fence(KEYS[1])
if type(fence) == 'table' then
  return fence
end
if fence and below(ARGV[1], fence) then
  return {STALE, fence}
end
if fence ~= ARGV[1] then
  redis.call('HSET', KEYS[1], 'f', ARGV[1])
end
if ARGV[2] == 'read' then
  local stored = redis.call('HMGET', KEYS[1], 't', 'v')
  return {FENCED, stored[1], stored[2]}
end
return {FENCED}
