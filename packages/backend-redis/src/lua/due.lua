-- due: the schedules a delivery could claim now, ordered by (due score, key bytes); claims nothing.
-- KEYS[1] due zset, KEYS[2] schedules hash.
-- ARGV[1] now (ms), ARGV[2] limit.
-- Returns {key1, value1, key2, value2, ...}. A schedule an open delivery holds is not among them: its due
-- score is its claim's expiry until the claim ends.
-- flags: no-writes
-- include: check-type
-- include: hmget-pairs

checkType(KEYS[1], 'zset')
checkType(KEYS[2], 'hash')
local keys = redis.call('ZRANGE', KEYS[1], '-inf', ARGV[1], 'BYSCORE', 'LIMIT', 0, ARGV[2])
return appendPairs({}, KEYS[2], keys)
