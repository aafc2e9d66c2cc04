-- claim-release: ends the claims of a delivery that rolled back: each schedule it still holds is due
-- again at its stored dueAt, unchanged otherwise.
-- KEYS[1] due zset, KEYS[2] schedules hash, KEYS[3] claims hash (schedule key -> claim token).
-- ARGV[1] claim token, ARGV[2..] the schedule keys the delivery claimed.
-- Returns the number of schedules whose claim was released.
-- include: check-type
-- include: schedule-value
-- include: release-claims

checkType(KEYS[1], 'zset')
checkType(KEYS[2], 'hash')
checkType(KEYS[3], 'hash')
local keys = {}
for j = 2, #ARGV do keys[#keys + 1] = ARGV[j] end
-- Every value is checked before the first write.
for first = 1, #keys, 400 do
  local values = redis.call('HMGET', KEYS[2], unpack(keys, first, math.min(first + 399, #keys)))
  for j, value in ipairs(values) do
    if value then parseSchedule(KEYS[2], keys[first + j - 1], value) end
  end
end
local _, released = releaseClaims(KEYS[1], KEYS[2], KEYS[3], ARGV[1], keys)
return released
