-- next-due: the earliest dueAt among schedules no delivery has claimed.
-- KEYS[1] due zset. ARGV[1] claim key prefix, ARGV[2] entries to examine at most.
-- Returns the score as a string, or nil when there is none. When every examined entry is claimed, returns
-- the last examined score (the dispatcher then looks again soon).
-- flags: no-writes
-- include: check-type

checkType(KEYS[1], 'zset')
local budget = tonumber(ARGV[2])
local offset = 0
local last
while offset < budget do
  local page = redis.call('ZRANGE', KEYS[1], offset, offset + 31, 'WITHSCORES')
  for j = 1, #page, 2 do
    if redis.call('EXISTS', ARGV[1] .. page[j]) == 0 then return page[j + 1] end
    last = page[j + 1]
  end
  if #page < 64 then return false end
  offset = offset + 32
end
return last
