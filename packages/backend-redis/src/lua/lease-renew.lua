-- lease-renew: extends a lease only for its holder (owner and token match) while it has not expired.
-- KEYS[1] the lease. ARGV[1] owner, ARGV[2] token, ARGV[3] time to live (ms).
-- Returns the token, or nil when the caller no longer holds the lease (an expired lease stays expired).
-- include: check-type

checkType(KEYS[1], 'string')
local current = redis.call('GET', KEYS[1])
if not current then return nil end
local token, owner = string.match(current, '^(%d+) (.*)$')
if not token then error({err = 'DUETIME_CORRUPT key ' .. KEYS[1] .. ' does not hold a duetime lease'}) end
if owner ~= ARGV[1] or token ~= ARGV[2] then return nil end
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return tonumber(token)
