-- lease-holder: who holds a lease and for how long yet, by the server's clock.
-- KEYS[1] the lease.
-- Returns {token, owner, remaining ms}, or nil when nobody holds it.
-- flags: no-writes
-- include: check-type

checkType(KEYS[1], 'string')
local current = redis.call('GET', KEYS[1])
if not current then return nil end
local token, owner = string.match(current, '^(%d+) (.*)$')
if not token then error({err = 'DUETIME_CORRUPT key ' .. KEYS[1] .. ' does not hold a duetime lease'}) end
return {token, owner, redis.call('PTTL', KEYS[1])}
