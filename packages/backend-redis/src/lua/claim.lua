-- claim: reserves one schedule version for a delivery, so other dispatchers leave it alone meanwhile.
-- KEYS[1] schedules hash, KEYS[2] the key's claim.
-- ARGV[1] key, ARGV[2] version, ARGV[3] claim value (unique per delivery), ARGV[4] claim time to live (ms).
-- Returns {1, schedule value} when claimed; {0} when the key is not active at that version; {-1} when
-- another delivery holds the claim.
-- include: check-type
-- include: schedule-value

checkType(KEYS[1], 'hash')
checkType(KEYS[2], 'string')
local value = redis.call('HGET', KEYS[1], ARGV[1])
if not value then return {0} end
if tonumber((parseSchedule(KEYS[1], ARGV[1], value))) ~= tonumber(ARGV[2]) then return {0} end
if not redis.call('SET', KEYS[2], ARGV[3], 'NX', 'PX', ARGV[4]) then return {-1} end
return {1, value}
