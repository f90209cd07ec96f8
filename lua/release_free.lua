-- The first part of the release script (release.lua documents its keys,
-- arguments and replies): the common case, the caller's own lock with
-- nobody queued, released by its holder (no queue entry to remove, no
-- marker to set). It runs before the shared preludes are defined, so
-- this case pays for none of them; any other case falls through, with
-- nothing written, to the full script below.
if ARGV[3] == '' and ARGV[4] == '' then
  local v = redis.pcall('GET', KEYS[1])
  if type(v) == 'string' and string.sub(v, 1, #ARGV[1]) == ARGV[1] and
      redis.call('EXISTS', KEYS[3]) == 0 then
    redis.call('DEL', KEYS[1])
    return {1}
  end
end
