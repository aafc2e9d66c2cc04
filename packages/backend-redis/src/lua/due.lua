-- due: the schedules a dispatcher may start now, ordered by (dueAt, key bytes), skipping those claimed by a
-- delivery in progress.
-- KEYS[1] due zset, KEYS[2] schedules hash.
-- ARGV[1] now (ms), ARGV[2] limit, ARGV[3] claim key prefix, ARGV[4] entries to examine at most.
-- Returns {key1, value1, key2, value2, ...}.
-- flags: no-writes
-- include: check-type
-- include: hmget-pairs

checkType(KEYS[1], 'zset')
checkType(KEYS[2], 'hash')
local limit = tonumber(ARGV[2])
local budget = tonumber(ARGV[4])
local keys = {}
local offset = 0
while #keys < limit and offset < budget do
  local count = math.min(math.max(limit - #keys, 16), 256)
  local page = redis.call('ZRANGE', KEYS[1], '-inf', ARGV[1], 'BYSCORE', 'LIMIT', offset, count)
  for _, key in ipairs(page) do
    if redis.call('EXISTS', ARGV[3] .. key) == 0 then
      keys[#keys + 1] = key
      if #keys == limit then break end
    end
  end
  if #page < count then break end
  offset = offset + count
end
return appendPairs({}, KEYS[2], keys)
