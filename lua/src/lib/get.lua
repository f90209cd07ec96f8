-- Reads that take a key of another Redis type for a state of its own (a
-- lock another owner's, a record of no grant), not for an error: they
-- return Redis's WRONGTYPE error reply, a table, instead of raising it.
-- Any other error of the read (an ACL refusal) is raised, before the
-- script writes anything, by the line that calls the same command again
-- without pcall: Redis 6.2 and 7.0 name only the line of a refused
-- command, and that line names the command.

-- Whether reply is Redis's WRONGTYPE error reply.
local function wrongtype(reply)
  return type(reply) == 'table' and type(reply.err) == 'string' and
    string.sub(reply.err, 1, 9) == 'WRONGTYPE'
end

-- GET key: its value, false when it is missing, or the WRONGTYPE error
-- reply when it holds another type.
local function get(key)
  local v = redis.pcall('GET', key)
  if type(v) == 'table' and not wrongtype(v) then
    redis.call('GET', key)
  end
  return v
end

-- HGET key field: the field's value, false when it or the key is
-- missing, or the WRONGTYPE error reply when the key is not a hash.
local function hget(key, field)
  local v = redis.pcall('HGET', key, field)
  if type(v) == 'table' and not wrongtype(v) then
    redis.call('HGET', key, field)
  end
  return v
end
