-- deliver: claims up to `limit` due schedules for one unit, so that other units leave them alone until it
-- commits, rolls back or its claims lapse.
-- KEYS[1] due zset (scored by dueAt), KEYS[2] schedules hash, KEYS[3] claims hash (schedule key ->
-- 'token version claimedUntil', claimedUntil in ms of the server's clock).
-- ARGV[1] now (ms), ARGV[2] limit, ARGV[3] claim time to live (ms), ARGV[4] claim token (unique per unit;
-- '' to claim nothing and only read).
-- Returns {key1, value1, interrupted1, key2, ...} in (dueAt, key bytes) order: the schedules due by now
-- whose version no live claim holds. `interrupted` is 1 when an earlier claim of the same version lapsed
-- without being settled (its process died). Every value is checked before the first write.
-- include: check-type
-- include: schedule-value
-- include: now

checkType(KEYS[1], 'zset')
checkType(KEYS[2], 'hash')
checkType(KEYS[3], 'hash')
local limit, token = tonumber(ARGV[2]), ARGV[4]
local now = serverMs()
local out, claims = {}, {}
local offset, page = 0, math.min(limit + 32, 500)
while #out < 3 * limit do
  local keys = redis.call('ZRANGE', KEYS[1], '-inf', ARGV[1], 'BYSCORE', 'LIMIT', offset, page)
  if #keys == 0 then break end
  local values = redis.call('HMGET', KEYS[2], unpack(keys))
  local held = token ~= '' and redis.call('HMGET', KEYS[3], unpack(keys)) or {}
  for j, key in ipairs(keys) do
    local value = values[j]
    if not value then
      error({err = 'DUETIME_CORRUPT key ' .. KEYS[1] .. ' lists ' .. key .. ', which ' .. KEYS[2] .. ' does not hold'})
    end
    local version = parseSchedule(KEYS[2], key, value)
    local owner, claimed, untilMs = string.match(held[j] or '', '^(%S+) (%d+) (%-?%d+)$')
    local same = owner ~= nil and claimed == version
    if not (same and tonumber(untilMs) > now) and #out < 3 * limit then
      out[#out + 1] = key
      out[#out + 1] = value
      out[#out + 1] = same and 1 or 0
      claims[#claims + 1] = key
      claims[#claims + 1] = token .. ' ' .. version .. ' ' .. string.format('%d', now + tonumber(ARGV[3]))
    end
  end
  if #keys < page then break end
  offset = offset + #keys
end
if token ~= '' then
  for first = 1, #claims, 400 do
    redis.call('HSET', KEYS[3], unpack(claims, first, math.min(first + 399, #claims)))
  end
end
return out
