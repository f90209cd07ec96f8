-- Extends the life of a leader record while it is the term's.
-- KEYS[1]: the election's leader record
-- ARGV[1]: the term's token (decimal), ARGV[2]: the record's life in
-- milliseconds
-- Returns 1 when extended, 0 when the record is another term's or gone.
local record = redis.call('GET', KEYS[1])
local prefix = ARGV[1] .. ':'
if type(record) ~= 'string' or string.sub(record, 1, #prefix) ~= prefix then
  return 0
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
