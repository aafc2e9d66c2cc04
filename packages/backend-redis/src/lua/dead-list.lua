-- dead-list: a page of dead letters in key order (bytes), optionally only keys starting with a literal
-- prefix, only keys after a given one.
-- KEYS[1] dead letters (hash: key -> JSON), KEYS[2] dead-letter index (zset, every score 0).
-- ARGV[1] prefix ('' for none), ARGV[2] after this key ('' for none), ARGV[3] limit.
-- Returns {key1, value1, key2, value2, ...}.
-- flags: no-writes
-- include: check-type
-- include: bytes-before
-- include: prefix-range
-- include: hmget-pairs

checkType(KEYS[1], 'hash')
checkType(KEYS[2], 'zset')
local low, high = prefixRange(ARGV[1])
-- After a key at or past the prefix's start, the page starts after that key.
if ARGV[2] ~= '' and (ARGV[1] == '' or not bytesBefore(ARGV[2], ARGV[1])) then low = '(' .. ARGV[2] end
local keys = redis.call('ZRANGE', KEYS[2], low, high, 'BYLEX', 'LIMIT', 0, ARGV[3])
return appendPairs({}, KEYS[1], keys)
