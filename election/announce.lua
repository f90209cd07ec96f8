-- announce: announces a leader: records its token and value, and
-- publishes them, if the lock is still held with that token.
--
-- KEYS[1]  the election's lock key
-- KEYS[2]  its leader record
-- ARGV[1]  the term's token (decimal)
-- ARGV[2]  the leader's value
-- ARGV[3]  the record's life in milliseconds
-- ARGV[4]  the channel
--
-- Replies:
--   PUBLISHED (1)     recorded and published
--   UNPUBLISHED (2)   recorded, but Redis refused the message (a user
--                     without pub/sub)
--   LOST (0)          the lock is no longer the term's: nothing is
--                     written
--   an error reply    WRONGTYPE when the lock key is of another type:
--                     nothing is written
--
-- The record holds "<token>:<value>"; the message is the same. Nothing
-- can fail once the record is written: the publish is a pcall.
local LOST, PUBLISHED, UNPUBLISHED = 0, 1, 2

local held = redis.call('GET', KEYS[1])
local suffix = ':' .. ARGV[1]
if type(held) ~= 'string' or string.sub(held, -#suffix) ~= suffix then
  return LOST
end
local record = ARGV[1] .. ':' .. ARGV[2]
redis.call('SET', KEYS[2], record, 'PX', ARGV[3])
local sent = redis.pcall('PUBLISH', ARGV[4], record)
if type(sent) == 'table' and sent.err then
  return UNPUBLISHED
end
return PUBLISHED
