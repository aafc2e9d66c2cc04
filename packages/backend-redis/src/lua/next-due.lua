-- next-due: the earliest due score: when the next schedule falls due, or when the earliest claim an open
-- delivery holds expires (claimed schedules are scored by their claim's expiry).
-- KEYS[1] due zset.
-- Returns the score as a string, or nil when there is none.
-- flags: no-writes
-- include: check-type

checkType(KEYS[1], 'zset')
local head = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if #head == 0 then return false end
return head[2]
