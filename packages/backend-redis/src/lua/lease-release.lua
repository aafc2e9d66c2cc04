-- lease-release: frees a lease only for its holder (owner and token match).
-- KEYS[1] the lease. ARGV[1] owner, ARGV[2] token.
-- Returns 1 when released, 0 otherwise. The token counter is kept, so the next holder gets a larger token.
-- include: check-type

checkType(KEYS[1], 'string')
local current = redis.call('GET', KEYS[1])
if not current then return 0 end
local token, owner = string.match(current, '^(%d+) (.*)$')
if not token then error({err = 'DUETIME_CORRUPT key ' .. KEYS[1] .. ' does not hold a duetime lease'}) end
if owner ~= ARGV[1] or token ~= ARGV[2] then return 0 end
redis.call('DEL', KEYS[1])
return 1
