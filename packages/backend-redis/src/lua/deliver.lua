-- deliver: claims a page of due schedules for one delivery, so that other deliveries leave them alone
-- until it commits, rolls back or its claim expires.
-- KEYS[1] due zset, KEYS[2] schedules hash, KEYS[3] claims hash (schedule key -> claim token).
-- ARGV[1] now (ms), ARGV[2] limit, ARGV[3] the claim's expiry (ms), ARGV[4] claim token (unique per
-- delivery; '' to claim nothing and only read).
-- Returns {key1, value1, key2, value2, ...}: the schedules with a due score <= now, in (score, key bytes)
-- order, at most `limit`. Claiming moves each one's due score to the claim's expiry (its stored dueAt is
-- kept), so no other delivery sees it as due until the claim ends, is renewed past it, or expires (its
-- holder died: then it is due again and the next delivery claims it, the token overwritten).
-- include: check-type
-- include: schedule-value
-- include: hmget-pairs
-- include: chunked

checkType(KEYS[1], 'zset')
checkType(KEYS[2], 'hash')
checkType(KEYS[3], 'hash')
local keys = redis.call('ZRANGE', KEYS[1], '-inf', ARGV[1], 'BYSCORE', 'LIMIT', 0, ARGV[2])
if #keys == 0 then return {} end
local out = appendPairs({}, KEYS[2], keys)
for j = 2, #out, 2 do
  if not out[j] then
    error({err = 'DUETIME_CORRUPT key ' .. KEYS[1] .. ' lists ' .. out[j - 1] .. ', which ' .. KEYS[2] .. ' does not hold'})
  end
  parseSchedule(KEYS[2], out[j - 1], out[j])
end
if ARGV[4] ~= '' then
  local scores, owners = {}, {}
  for _, key in ipairs(keys) do
    scores[#scores + 1] = ARGV[3]
    scores[#scores + 1] = key
    owners[#owners + 1] = key
    owners[#owners + 1] = ARGV[4]
  end
  chunked('ZADD', KEYS[1], 'XX', scores, 2)
  chunked('HSET', KEYS[3], nil, owners, 2)
end
return out
