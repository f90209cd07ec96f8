-- Reads an election's lock and leader record, writing nothing.
-- KEYS[1]: the election's lock key, KEYS[2]: its leader record
-- Returns {lock, record}: each value, or false when missing.
return {redis.call('GET', KEYS[1]), redis.call('GET', KEYS[2])}
