-- lease-acquire: takes a free or expired lease, or renews one the same owner already holds (same token).
-- KEYS[1] the lease (string 'token owner', expiring by PX), KEYS[2] the store's fencing-token counter.
-- ARGV[1] owner, ARGV[2] time to live (ms).
-- Returns the fencing token, or nil when another owner holds the lease. Tokens come from one counter that
-- only grows; when the counter is missing (a new store, or a server that lost its data) it starts from the
-- server's clock in microseconds, so tokens keep growing across such a loss too.
-- include: check-type

checkType(KEYS[1], 'string')
checkType(KEYS[2], 'string')
local current = redis.call('GET', KEYS[1])
if current then
  local token, owner = string.match(current, '^(%d+) (.*)$')
  if not token then error({err = 'DUETIME_CORRUPT key ' .. KEYS[1] .. ' does not hold a duetime lease'}) end
  if owner ~= ARGV[1] then return nil end
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return tonumber(token)
end
if redis.call('EXISTS', KEYS[2]) == 0 then
  local time = redis.call('TIME')
  redis.call('SET', KEYS[2], time[1] .. string.format('%06d', tonumber(time[2])))
end
local token = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], string.format('%d', token) .. ' ' .. ARGV[1], 'PX', ARGV[2])
return token
