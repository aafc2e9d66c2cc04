-- claim-renew: extends the claims a unit still holds to the server's clock plus their time to live.
-- KEYS[1] claims hash (schedule key -> 'token version claimedUntil').
-- ARGV[1] claim token, ARGV[2] time to live (ms), ARGV[3..] the schedule keys the unit claimed.
-- Returns how many claims were still held (and were extended).
-- include: check-type
-- include: now

checkType(KEYS[1], 'hash')
local untilMs = string.format('%d', serverMs() + tonumber(ARGV[2]))
local renewed = 0
for j = 3, #ARGV do
  local owner, version = string.match(redis.call('HGET', KEYS[1], ARGV[j]) or '', '^(%S+) (%d+) ')
  if owner == ARGV[1] then
    redis.call('HSET', KEYS[1], ARGV[j], owner .. ' ' .. version .. ' ' .. untilMs)
    renewed = renewed + 1
  end
end
return renewed
