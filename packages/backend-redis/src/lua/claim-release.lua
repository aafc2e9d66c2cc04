-- claim-release: ends the claims a unit still holds (it rolled back, or its claimed page was unreadable);
-- the schedules stay as they are, due at their stored dueAt.
-- KEYS[1] claims hash (schedule key -> 'token version claimedUntil').
-- ARGV[1] claim token, ARGV[2..] the schedule keys the unit claimed.
-- Returns how many claims were released.
-- include: check-type

checkType(KEYS[1], 'hash')
local released = 0
for j = 2, #ARGV do
  local owner = string.match(redis.call('HGET', KEYS[1], ARGV[j]) or '', '^(%S+) ')
  if owner == ARGV[1] then released = released + redis.call('HDEL', KEYS[1], ARGV[j]) end
end
return released
