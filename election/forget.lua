-- forget: deletes a term's leader record once the term has ended, so
-- that a resigned leader leaves nothing behind.
--
-- KEYS[1]  the election's leader record, "<token>:<value>"
-- ARGV[1]  the ended term's token (decimal)
--
-- Replies:
--   FORGOTTEN (1)   the record was the term's, and is deleted
--   KEPT (0)        the record is missing, or another term's (the next
--                   leader's, announced meanwhile): it stays
--   an error reply  WRONGTYPE when the record is of another type: it
--                   stays
local KEPT, FORGOTTEN = 0, 1

local record = redis.call('GET', KEYS[1])
local prefix = ARGV[1] .. ':'
if type(record) == 'string' and string.sub(record, 1, #prefix) == prefix then
  redis.call('DEL', KEYS[1])
  return FORGOTTEN
end
return KEPT
