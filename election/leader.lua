-- leader: reads an election's lock and leader record, writing nothing.
--
-- KEYS[1]  the election's lock key
-- KEYS[2]  its leader record
--
-- Replies:
--   {lock, record}   each key's value, false when missing
--   an error reply   WRONGTYPE when a key is of another type
return {redis.call('GET', KEYS[1]), redis.call('GET', KEYS[2])}
