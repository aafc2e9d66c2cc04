-- list: a slice of active schedules ordered by (score, key bytes) in one of the order indexes (the at zset,
-- scored by deadline; the due zset, by dueAt; the key index, every score 0), optionally only scores up to
-- `through`, keys starting with a literal prefix, recurring ones or one-shot ones, and positions after
-- (afterScore, afterKey).
-- KEYS[1] the order zset, KEYS[2] schedules hash, KEYS[3] index zset (score 0, by key).
-- ARGV[1] through (ms, '' for none), ARGV[2] prefix ('' for none), ARGV[3] after score (ms, '' for none),
-- ARGV[4] after key, ARGV[5] limit, ARGV[6] entries to examine at most, ARGV[7] largest prefix match sorted
-- directly (above it, the order is walked and filtered), ARGV[8] '1' recurring only, '0' one-shot only, ''
-- either, ARGV[9] '1' for heads only (each value cut to its header).
-- Returns {done, resumeScore, resumeKey, key1, value1, ...}: done is 1 when nothing further can match; else
-- the caller continues after (resumeScore, resumeKey), the last entry examined.
-- flags: no-writes
-- include: check-type
-- include: bytes-before
-- include: prefix-range
-- include: hmget-pairs

checkType(KEYS[1], 'zset')
checkType(KEYS[2], 'hash')
checkType(KEYS[3], 'zset')
local through = math.huge
if ARGV[1] ~= '' then through = tonumber(ARGV[1]) end
local prefix = ARGV[2]
local hasAfter = ARGV[3] ~= ''
local afterAt = tonumber(ARGV[3])
local afterKey = ARGV[4]
local limit = tonumber(ARGV[5])

local function isAfter(at, key)
  return not hasAfter or at > afterAt or (at == afterAt and bytesBefore(afterKey, key))
end

-- Whether the schedule under `key` passes the recurring filter (recurring ones hold an 'r' field first).
local function kept(key)
  if ARGV[8] == '' then return true end
  local value = redis.call('HGET', KEYS[2], key)
  local recurring = value ~= false and string.match(value, '^%d+ %-?%d+ %-?%d+ %d+ r') ~= nil
  return recurring == (ARGV[8] == '1')
end

local function reply(done, resumeAt, resumeKey, keys)
  return appendPairs({done, resumeAt, resumeKey}, KEYS[2], keys, ARGV[9] == '1')
end

-- Few keys under the prefix: take them from the index and sort them by (score, key).
if prefix ~= '' then
  local low, high = prefixRange(prefix)
  if redis.call('ZLEXCOUNT', KEYS[3], low, high) <= tonumber(ARGV[7]) then
    local members = redis.call('ZRANGEBYLEX', KEYS[3], low, high)
    local rows = {}
    for first = 1, #members, 500 do
      local last = math.min(first + 499, #members)
      local scores = redis.call('ZMSCORE', KEYS[1], unpack(members, first, last))
      for j = first, last do
        local at = tonumber(scores[j - first + 1])
        if at and at <= through and isAfter(at, members[j]) then rows[#rows + 1] = {at, members[j]} end
      end
    end
    table.sort(rows, function(x, y)
      if x[1] ~= y[1] then return x[1] < y[1] end
      return bytesBefore(x[2], y[2])
    end)
    local keys = {}
    for j = 1, #rows do
      if #keys == limit then break end
      if kept(rows[j][2]) then keys[#keys + 1] = rows[j][2] end
    end
    return reply(1, '', '', keys)
  end
end

-- Otherwise walk the order from the first position after (afterAt, afterKey).
local rank = 0
if hasAfter then
  local score = redis.call('ZSCORE', KEYS[1], afterKey)
  if score and tonumber(score) == afterAt then
    rank = redis.call('ZRANK', KEYS[1], afterKey) + 1
  else
    -- The key has moved or gone: binary search among the members sharing its score.
    local low = redis.call('ZCOUNT', KEYS[1], '-inf', '(' .. ARGV[3])
    local high = low + redis.call('ZCOUNT', KEYS[1], ARGV[3], ARGV[3])
    while low < high do
      local mid = math.floor((low + high) / 2)
      if bytesBefore(afterKey, redis.call('ZRANGE', KEYS[1], mid, mid)[1]) then high = mid else low = mid + 1 end
    end
    rank = low
  end
end
local budget = tonumber(ARGV[6])
local keys = {}
local examined = 0
while true do
  local page = redis.call('ZRANGE', KEYS[1], rank, rank + 255, 'WITHSCORES')
  for j = 1, #page, 2 do
    local key, score = page[j], page[j + 1]
    if tonumber(score) > through then return reply(1, '', '', keys) end
    examined = examined + 1
    if (prefix == '' or string.sub(key, 1, #prefix) == prefix) and kept(key) then
      keys[#keys + 1] = key
      if #keys == limit then return reply(0, score, key, keys) end
    end
    if examined >= budget then return reply(0, score, key, keys) end
  end
  if #page < 512 then return reply(1, '', '', keys) end
  rank = rank + 256
end
