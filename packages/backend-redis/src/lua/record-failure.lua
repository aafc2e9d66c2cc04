-- record-failure: notes a failed delivery of one schedule version (attempts, next due time).
-- KEYS[1] schedules hash, KEYS[2] due zset.
-- ARGV[1] key, ARGV[2] version, ARGV[3] attempts, ARGV[4] next due time (ms).
-- Returns 1 when recorded, 0 when the key is no longer at that version (nothing written).
-- include: check-type
-- include: schedule-value

checkType(KEYS[1], 'hash')
checkType(KEYS[2], 'zset')
local value = redis.call('HGET', KEYS[1], ARGV[1])
if not value then return 0 end
local version, at = parseSchedule(KEYS[1], ARGV[1], value)
if tonumber(version) ~= tonumber(ARGV[2]) then return 0 end
local header = string.match(value, '^%d+ %-?%d+ %-?%d+ %d+ ')
local message = string.sub(value, #header + 1)
redis.call('HSET', KEYS[1], ARGV[1], version .. ' ' .. at .. ' ' .. ARGV[4] .. ' ' .. ARGV[3] .. ' ' .. message)
redis.call('ZADD', KEYS[2], ARGV[4], ARGV[1])
return 1
