-- keep: keeps a term's leader record while the lock is held with the
-- term's token: extends the record's life when it runs low, and writes
-- it again, and publishes it, when it is missing or another term's
-- (deleted by hand, evicted, overwritten).
--
-- KEYS[1]  the election's lock key
-- KEYS[2]  its leader record, "<token>:<value>"
-- ARGV[1]  the term's token (decimal)
-- ARGV[2]  the leader's value
-- ARGV[3]  the record's life in milliseconds
-- ARGV[4]  the life in milliseconds below which it is extended
-- ARGV[5]  the channel
--
-- Replies:
--   KEPT (1)          the record is the term's (extended if its life ran
--                     low)
--   PUBLISHED (2)     the record is written again, and published
--   UNPUBLISHED (3)   the record is written again, but Redis refused the
--                     message (a user without pub/sub)
--   LOST (0)          the lock is no longer the term's: nothing is
--                     written
--   an error reply    WRONGTYPE when the lock key is of another type:
--                     nothing is written
--
-- It writes only when the record needs it. Nothing can fail once it has
-- written: the reads come first, and the publish is a pcall.
local LOST, KEPT, PUBLISHED, UNPUBLISHED = 0, 1, 2, 3

local held = redis.call('GET', KEYS[1])
local suffix = ':' .. ARGV[1]
if type(held) ~= 'string' or string.sub(held, -#suffix) ~= suffix then
  return LOST
end
-- A record of another type is overwritten, as a missing one. (A GET
-- refused by an ACL raised on the lock's read above, so the pcall fails
-- only on a record of another type.)
local record = redis.pcall('GET', KEYS[2])
local prefix = ARGV[1] .. ':'
if type(record) == 'string' and string.sub(record, 1, #prefix) == prefix then
  if redis.call('PTTL', KEYS[2]) < tonumber(ARGV[4]) then
    redis.call('PEXPIRE', KEYS[2], ARGV[3])
  end
  return KEPT
end
record = prefix .. ARGV[2]
redis.call('SET', KEYS[2], record, 'PX', ARGV[3])
local sent = redis.pcall('PUBLISH', ARGV[5], record)
if type(sent) == 'table' and sent.err then
  return UNPUBLISHED
end
return PUBLISHED
