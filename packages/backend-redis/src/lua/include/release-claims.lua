-- Ends a delivery's claims on `keys`. Each schedule still claimed by `token`, or by nobody, gets its due
-- score back from the dueAt it stores, and the claim is dropped; one that another delivery claimed since
-- (after this one's claim expired) is left to that delivery. Every value read here must already be known
-- to be well formed (the caller checked it, or wrote it). Returns the earliest due score restored and how
-- many claims of `token` were dropped.
local function releaseClaims(due, schedules, claims, token, keys)
  local earliest, count = nil, 0
  for first = 1, #keys, 400 do
    local last = math.min(first + 399, #keys)
    local owners = redis.call('HMGET', claims, unpack(keys, first, last))
    local values = redis.call('HMGET', schedules, unpack(keys, first, last))
    local scores, dropped = {}, {}
    for j = first, last do
      local owner, value = owners[j - first + 1], values[j - first + 1]
      if not owner or owner == token then
        if owner then dropped[#dropped + 1] = keys[j] end
        if value then
          local _, _, dueAt = parseSchedule(schedules, keys[j], value)
          scores[#scores + 1] = dueAt
          scores[#scores + 1] = keys[j]
          if not earliest or tonumber(dueAt) < earliest then earliest = tonumber(dueAt) end
        end
      end
    end
    if #scores > 0 then redis.call('ZADD', due, 'XX', unpack(scores)) end
    if #dropped > 0 then count = count + redis.call('HDEL', claims, unpack(dropped)) end
  end
  return earliest, count
end
