-- Announces a leader: records its token and value, and publishes them,
-- if the lock is still held with that token.
-- KEYS[1]: the election's lock key, KEYS[2]: its leader record
-- ARGV[1]: the term's token (decimal), ARGV[2]: the leader's value,
-- ARGV[3]: the record's life in milliseconds, ARGV[4]: the channel
-- Returns 1 when announced, 0 when the lock is no longer the term's.
--
-- The record holds "<token>:<value>"; the message is the same.
local held = redis.call('GET', KEYS[1])
local suffix = ':' .. ARGV[1]
if type(held) ~= 'string' or string.sub(held, -#suffix) ~= suffix then
  return 0
end
local record = ARGV[1] .. ':' .. ARGV[2]
redis.call('SET', KEYS[2], record, 'PX', ARGV[3])
redis.call('PUBLISH', ARGV[4], record)
return 1
