-- claim-renew: extends the claims a delivery still holds on the versions it claimed, moving their due
-- scores to the new expiry. A schedule replaced since (a new version, due on its own) loses the claim.
-- KEYS[1] due zset, KEYS[2] schedules hash, KEYS[3] claims hash (schedule key -> claim token).
-- ARGV[1] claim token, ARGV[2] new expiry (ms), ARGV[3..] pairs of schedule key and the version claimed.
-- Returns how many of the claims were still held (and were extended).
-- include: check-type
-- include: schedule-value

checkType(KEYS[1], 'zset')
checkType(KEYS[2], 'hash')
checkType(KEYS[3], 'hash')
local keys, versions = {}, {}
for j = 3, #ARGV, 2 do
  keys[#keys + 1] = ARGV[j]
  versions[#versions + 1] = tonumber(ARGV[j + 1])
end
-- Every value is checked before the first write.
local renew, drop = {}, {}
for first = 1, #keys, 400 do
  local last = math.min(first + 399, #keys)
  local owners = redis.call('HMGET', KEYS[3], unpack(keys, first, last))
  local values = redis.call('HMGET', KEYS[2], unpack(keys, first, last))
  for j = first, last do
    local owner, value = owners[j - first + 1], values[j - first + 1]
    if owner == ARGV[1] then
      if value and tonumber((parseSchedule(KEYS[2], keys[j], value))) == versions[j] then
        renew[#renew + 1] = ARGV[2]
        renew[#renew + 1] = keys[j]
      else
        drop[#drop + 1] = keys[j]
      end
    end
  end
end
for first = 1, #renew, 400 do
  redis.call('ZADD', KEYS[1], 'XX', unpack(renew, first, math.min(first + 399, #renew)))
end
for first = 1, #drop, 400 do
  redis.call('HDEL', KEYS[3], unpack(drop, first, math.min(first + 399, #drop)))
end
return #renew / 2
