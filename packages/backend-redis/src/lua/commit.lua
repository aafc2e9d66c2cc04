-- commit: applies one transaction's operations in order, all of them or none.
-- KEYS[1] schedules (hash: key -> 'version at dueAt attempts message'), KEYS[2] due (zset scored by dueAt),
-- KEYS[3] at (zset scored by deadline), KEYS[4] index (zset, every score 0, for literal prefix ranges),
-- KEYS[5] version counter, KEYS[6] this commit's marker, KEYS[7..] event lists and claims named by operations.
-- ARGV[1] marker time to live (ms), ARGV[2] change channel, ARGV[3] sender id, then the operations in order,
-- each a name followed by its fields:
--   append <KEYS index of the event list> <aggregate id> <expected sequence> <count> <event JSON>...
--   put <key> <at ms> <message JSON>
--   delete <key>
--   prefix <literal prefix>
--   consume <key> <version> <KEYS index of its claim, 0 for none> <claim value>
-- Returns {'ok'}; {'duplicate'} when the marker exists (an earlier attempt of this commit applied it); or
-- {'conflict', 'aggregate' | 'schedule', subject} having written nothing. Data of the wrong shape fails the
-- script with a DUETIME_CORRUPT error, also before anything is written.
-- include: check-type
-- include: schedule-value
-- include: prefix-range

if redis.call('EXISTS', KEYS[6]) == 1 then return {'duplicate'} end

local ops = {}
local hasPut = false
local i = 4
while i <= #ARGV do
  local name = ARGV[i]
  if name == 'append' then
    local count = tonumber(ARGV[i + 4])
    ops[#ops + 1] = {name = name, list = KEYS[tonumber(ARGV[i + 1])], id = ARGV[i + 2],
      expected = tonumber(ARGV[i + 3]), first = i + 5, count = count}
    i = i + 5 + count
  elseif name == 'put' then
    ops[#ops + 1] = {name = name, key = ARGV[i + 1], at = ARGV[i + 2], message = ARGV[i + 3]}
    hasPut = true
    i = i + 4
  elseif name == 'delete' or name == 'prefix' then
    ops[#ops + 1] = {name = name, key = ARGV[i + 1]}
    i = i + 2
  elseif name == 'consume' then
    local claim = tonumber(ARGV[i + 3])
    ops[#ops + 1] = {name = name, key = ARGV[i + 1], version = tonumber(ARGV[i + 2]),
      claim = claim > 0 and KEYS[claim] or nil, claimValue = ARGV[i + 4]}
    i = i + 5
  else
    return redis.error_reply('ERR duetime commit: unknown operation ' .. tostring(name))
  end
end

-- Checks, against the state the earlier operations of this commit leave behind. Nothing is written yet.
checkType(KEYS[1], 'hash')
checkType(KEYS[2], 'zset')
checkType(KEYS[3], 'zset')
checkType(KEYS[4], 'zset')
checkType(KEYS[5], 'string')
if hasPut then
  local counter = redis.call('GET', KEYS[5])
  if counter and not string.match(counter, '^%d+$') then
    error({err = 'DUETIME_CORRUPT key ' .. KEYS[5] .. ' does not hold a version counter'})
  end
end
local lengths = {}
local overlay = {}
local prefixes = {}
local function removedByPrefix(key)
  for _, prefix in ipairs(prefixes) do
    if string.sub(key, 1, #prefix) == prefix then return true end
  end
  return false
end
for _, op in ipairs(ops) do
  if op.name == 'append' then
    checkType(op.list, 'list')
    local length = lengths[op.list] or redis.call('LLEN', op.list)
    if length ~= op.expected then return {'conflict', 'aggregate', op.id} end
    lengths[op.list] = op.expected + op.count
  elseif op.name == 'put' then
    overlay[op.key] = 'put'
  elseif op.name == 'delete' then
    overlay[op.key] = 'gone'
  elseif op.name == 'prefix' then
    for key in pairs(overlay) do
      if string.sub(key, 1, #op.key) == op.key then overlay[key] = 'gone' end
    end
    prefixes[#prefixes + 1] = op.key
  else
    if op.claim then checkType(op.claim, 'string') end
    if overlay[op.key] or removedByPrefix(op.key) then return {'conflict', 'schedule', op.key} end
    local value = redis.call('HGET', KEYS[1], op.key)
    if not value then return {'conflict', 'schedule', op.key} end
    if tonumber((parseSchedule(KEYS[1], op.key, value))) ~= op.version then
      return {'conflict', 'schedule', op.key}
    end
    overlay[op.key] = 'gone'
  end
end

-- Apply.
local function removeSchedules(keys)
  for first = 1, #keys, 500 do
    local last = math.min(first + 499, #keys)
    redis.call('HDEL', KEYS[1], unpack(keys, first, last))
    redis.call('ZREM', KEYS[2], unpack(keys, first, last))
    redis.call('ZREM', KEYS[3], unpack(keys, first, last))
    redis.call('ZREM', KEYS[4], unpack(keys, first, last))
  end
end
local earliest
for _, op in ipairs(ops) do
  if op.name == 'append' then
    local stop = op.first + op.count - 1
    for first = op.first, stop, 500 do
      redis.call('RPUSH', op.list, unpack(ARGV, first, math.min(first + 499, stop)))
    end
  elseif op.name == 'put' then
    local version = string.format('%d', redis.call('INCR', KEYS[5]))
    redis.call('HSET', KEYS[1], op.key, version .. ' ' .. op.at .. ' ' .. op.at .. ' 0 ' .. op.message)
    redis.call('ZADD', KEYS[2], op.at, op.key)
    redis.call('ZADD', KEYS[3], op.at, op.key)
    redis.call('ZADD', KEYS[4], 0, op.key)
    if not earliest or tonumber(op.at) < tonumber(earliest) then earliest = op.at end
  elseif op.name == 'delete' then
    removeSchedules({op.key})
  elseif op.name == 'prefix' then
    local low, high = prefixRange(op.key)
    local keys = redis.call('ZRANGEBYLEX', KEYS[4], low, high)
    if #keys > 0 then removeSchedules(keys) end
  else
    removeSchedules({op.key})
    if op.claim and redis.call('GET', op.claim) == op.claimValue then redis.call('DEL', op.claim) end
  end
end
redis.call('SET', KEYS[6], '1', 'PX', ARGV[1])
if earliest then redis.call('PUBLISH', ARGV[2], earliest .. ' ' .. ARGV[3]) end
return {'ok'}
