-- cursor-advance: keeps the larger of the stored instant and the given one, and refreshes the time to live.
-- KEYS[1] the cursor (string, ms since the epoch, expiring by PX). ARGV[1] instant (ms), ARGV[2] time to live (ms).
-- Returns the stored instant (ms, as a string).
-- include: check-type

checkType(KEYS[1], 'string')
local stored = ARGV[1]
local current = redis.call('GET', KEYS[1])
if current then
  if not string.match(current, '^%-?%d+$') then
    error({err = 'DUETIME_CORRUPT key ' .. KEYS[1] .. ' does not hold a duetime cursor'})
  end
  if tonumber(current) > tonumber(ARGV[1]) then stored = current end
end
redis.call('SET', KEYS[1], stored, 'PX', ARGV[2])
return stored
