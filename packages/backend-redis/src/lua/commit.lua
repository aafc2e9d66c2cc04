-- commit: applies a unit's changes in one atomic step: its plain writes as one group, then one group per
-- settled claim (the settlement and its schedule's writes), each group all or nothing, independently of
-- the others, in order; then the unit's claims end.
-- KEYS[1] schedules (hash: key -> 'version at dueAt attempts [fields] message', see schedule-fields), KEYS[2]
-- due (zset scored by dueAt), KEYS[3] at (zset scored by deadline), KEYS[4] index (zset, every score 0, for
-- literal prefix ranges), KEYS[5] version counter, KEYS[6] this commit's marker, KEYS[7] claims (hash:
-- schedule key -> 'token version claimedUntil'), KEYS[8] dead letters (hash: key -> JSON), KEYS[9]
-- dead-letter index (zset, every score 0), KEYS[10..] event lists named by operations.
-- ARGV[1] marker time to live (ms), ARGV[2] change channel, ARGV[3] sender id, ARGV[4] the unit's claim
-- token ('' for none), ARGV[5] n, ARGV[6 .. 5+n] the keys the unit claimed, then the groups in order, each
-- the word 'group' followed by its operations, each a name and its fields:
--   append <KEYS index of the event list> <aggregate id> <expected sequence> <count> <event JSON>...
--   put <key> <at ms> <due ms> <state tag: r, s or ''> <state JSON> <message JSON> <if version, or ''>
--   next <key> <at ms> <due ms> <state tag> <state JSON> <message JSON>  (a put, only when the key has no
--        schedule then)
--   delete <key>
--   prefix <literal prefix>
--   consume <key> <version>   (the claimed version, still claimed by this unit)
--   fail <key> <version> <attempts> <due ms> <at ms, or '' to keep it> <error text>  (a retry: applies only
--        while the key is at that version and claimed by this unit, and never fails its group)
--   dead <key> <dead letter JSON>   (replaces the key's dead letter)
--   undead <key>                    (deletes it)
-- Every group is checked against the state the applied groups before it and its own earlier operations
-- leave (each aggregate's sequence, each consumed or conditionally put schedule's version, whether a key
-- armed with `next` has a schedule) and left out whole when a check fails. Every group is checked before
-- anything is written (a script that fails halfway is not rolled back).
-- Returns {'ok', g1, kind1, subject1, g2, ...}: the groups left out (1-based index; 'aggregate', 'schedule'
-- or 'version'; the aggregate id or key); {'duplicate', ...the same} when the marker exists (an earlier
-- attempt of this commit applied it). Data of the wrong shape fails the script with a DUETIME_CORRUPT
-- error, also before anything is written.
-- include: check-type
-- include: schedule-value
-- include: schedule-fields
-- include: prefix-range
-- include: chunked

local marker = redis.call('GET', KEYS[6])
if marker then
  -- A resent commit writes too (the marker's expiry), so a WAIT that follows it on a new connection waits for
  -- the replication of everything up to here, the first run included.
  redis.call('PEXPIRE', KEYS[6], ARGV[1])
  if marker == '1' then return {'duplicate'} end
  local reply = cjson.decode(marker)
  table.insert(reply, 1, 'duplicate')
  return reply
end

-- Takes `n` versions with one INCRBY, once every check passed; returns the number before the first. A
-- counter that is not a non-negative integer fails the script with nothing written (a negative one is put
-- back).
local function takeVersions(n)
  local reply = redis.pcall('INCRBY', KEYS[5], n)
  if type(reply) == 'number' and reply < n then redis.call('DECRBY', KEYS[5], n) end
  if type(reply) ~= 'number' or reply < n then
    error({err = 'DUETIME_CORRUPT key ' .. KEYS[5] .. ' does not hold a version counter'})
  end
  return reply - n
end

-- Writes `puts` (each {key, at, dueAt, tag, state, message}) as new schedules numbered from `version` + 1
-- on, a few hundred per call; a key put twice keeps the later one. Returns the last version used.
local function writePuts(puts, version)
  local values, due, at, index = {}, {}, {}, {}
  for _, put in ipairs(puts) do
    version = version + 1
    local fields = put.tag == '' and '' or field(put.tag, put.state)
    values[#values + 1] = put.key
    values[#values + 1] = string.format('%d', version) .. ' ' .. put.at .. ' ' .. put.dueAt .. ' 0 ' .. fields .. put.message
    due[#due + 1] = put.dueAt
    due[#due + 1] = put.key
    at[#at + 1] = put.at
    at[#at + 1] = put.key
    index[#index + 1] = 0
    index[#index + 1] = put.key
  end
  chunked('HSET', KEYS[1], nil, values, 2)
  chunked('ZADD', KEYS[2], nil, due, 2)
  chunked('ZADD', KEYS[3], nil, at, 2)
  chunked('ZADD', KEYS[4], nil, index, 2)
  return version
end

-- Parse.
local token = ARGV[4]
local claimed = {}
local i = 6 + tonumber(ARGV[5])
for j = 6, i - 1 do claimed[#claimed + 1] = ARGV[j] end
local groups = {}
local group
local hasDead, onlyPuts = false, true
while i <= #ARGV do
  local name = ARGV[i]
  local op
  if name == 'group' then
    group = {}
    groups[#groups + 1] = group
    i = i + 1
  elseif name == 'append' then
    local count = tonumber(ARGV[i + 4])
    op = {list = KEYS[tonumber(ARGV[i + 1])], id = ARGV[i + 2], expected = tonumber(ARGV[i + 3]),
      first = i + 5, count = count}
    i = i + 5 + count
  elseif name == 'put' or name == 'next' then
    op = {key = ARGV[i + 1], at = ARGV[i + 2], dueAt = ARGV[i + 3], tag = ARGV[i + 4], state = ARGV[i + 5],
      message = ARGV[i + 6]}
    if name == 'put' then
      op.ifVersion = tonumber(ARGV[i + 7])
      i = i + 8
    else
      i = i + 7
    end
  elseif name == 'delete' or name == 'prefix' or name == 'undead' then
    op = {key = ARGV[i + 1]}
    i = i + 2
  elseif name == 'consume' then
    op = {key = ARGV[i + 1], version = ARGV[i + 2]}
    i = i + 3
  elseif name == 'fail' then
    op = {key = ARGV[i + 1], version = ARGV[i + 2], attempts = ARGV[i + 3], dueAt = ARGV[i + 4],
      at = ARGV[i + 5], error = ARGV[i + 6]}
    i = i + 7
  elseif name == 'dead' then
    op = {key = ARGV[i + 1], record = ARGV[i + 2]}
    i = i + 3
  else
    return redis.error_reply('ERR duetime commit: unknown operation ' .. tostring(name))
  end
  if op then
    if not group then return redis.error_reply('ERR duetime commit: an operation before the first group') end
    op.name = name
    group[#group + 1] = op
    if name == 'dead' or name == 'undead' then hasDead = true end
    if name ~= 'put' or op.ifVersion then onlyPuts = false end
  end
end

-- Checks. Nothing is written until every group is checked, and every key a write may touch has its type.
checkType(KEYS[1], 'hash')
checkType(KEYS[2], 'zset')
checkType(KEYS[3], 'zset')
checkType(KEYS[4], 'zset')
checkType(KEYS[7], 'hash')
if hasDead then
  checkType(KEYS[8], 'hash')
  checkType(KEYS[9], 'zset')
end
-- The version counter is checked by the INCRBY that takes the versions, after every other check.

-- The stored version (and value) of every schedule an operation checks, and who claims it.
local versions, stored, owners = {}, {}, {}
if not onlyPuts then
  local wanted, seen = {}, {}
  for _, ops in ipairs(groups) do
    for _, op in ipairs(ops) do
      local n = op.name
      if (n == 'consume' or n == 'fail' or n == 'next' or op.ifVersion) and not seen[op.key] then
        seen[op.key] = true
        wanted[#wanted + 1] = op.key
      end
    end
  end
  for first = 1, #wanted, 400 do
    local last = math.min(first + 399, #wanted)
    local values = redis.call('HMGET', KEYS[1], unpack(wanted, first, last))
    local claims = redis.call('HMGET', KEYS[7], unpack(wanted, first, last))
    for j, value in ipairs(values) do
      local key = wanted[first + j - 1]
      if value then
        versions[key] = parseSchedule(KEYS[1], key, value)
        stored[key] = value
      end
      owners[key] = string.match(claims[j] or '', '^(%S+) ')
    end
  end
end

-- Whether this unit holds the claim on `key` (always, without claims: the version check decides).
local function ours(key)
  return token == '' or owners[key] == token
end

local function under(prefixes, key)
  for _, prefix in ipairs(prefixes) do
    if string.sub(key, 1, #prefix) == prefix then return true end
  end
  return false
end

-- What the applied groups leave: schedules put or gone, prefixes deleted, event list lengths.
local state, deleted, lengths = {}, {}, {}
-- The stored version `key` still has after the group's earlier operations (`own`, `ownDeleted`) and the
-- applied groups; nil when it is gone or was put anew (a new version, not yet numbered).
local function versionOf(key, own, ownDeleted)
  if own[key] or under(ownDeleted, key) or state[key] or under(deleted, key) then return nil end
  return versions[key]
end
-- Whether `key` has a schedule at this point of the group.
local function exists(key, own, ownDeleted)
  if own[key] then return own[key] == 'put' end
  if under(ownDeleted, key) then return false end
  if state[key] then return state[key] == 'put' end
  if under(deleted, key) then return false end
  return versions[key] ~= nil
end

local rejected = {}
for g, ops in ipairs(groups) do
  local own, ownDeleted, ownLengths = {}, {}, {}
  local conflict
  for _, op in ipairs(ops) do
    local name = op.name
    if name == 'append' then
      checkType(op.list, 'list')
      local length = ownLengths[op.list] or lengths[op.list] or redis.call('LLEN', op.list)
      if length ~= op.expected then
        conflict = {'aggregate', op.id}
        break
      end
      ownLengths[op.list] = op.expected + op.count
    elseif name == 'put' then
      if op.ifVersion and tonumber(versionOf(op.key, own, ownDeleted)) ~= op.ifVersion then
        conflict = {'version', op.key}
        break
      end
      own[op.key] = 'put'
    elseif name == 'next' then
      op.applies = not exists(op.key, own, ownDeleted)
      if op.applies then own[op.key] = 'put' end
    elseif name == 'delete' then
      own[op.key] = 'gone'
    elseif name == 'prefix' then
      for key in pairs(own) do
        if string.sub(key, 1, #op.key) == op.key then own[key] = 'gone' end
      end
      ownDeleted[#ownDeleted + 1] = op.key
    elseif name == 'consume' then
      if versionOf(op.key, own, ownDeleted) ~= op.version or not ours(op.key) then
        conflict = {'schedule', op.key}
        break
      end
      own[op.key] = 'gone'
    elseif name == 'fail' then
      op.applies = versionOf(op.key, own, ownDeleted) == op.version and ours(op.key)
      if op.applies then
        op.fields, op.message = fieldsWithout(stored[op.key], 'e')
        if not op.fields then
          error({err = 'DUETIME_CORRUPT key ' .. KEYS[1] .. ' field ' .. op.key .. ' does not hold a duetime schedule'})
        end
      end
    end
  end
  if conflict then
    ops.rejected = true
    rejected[#rejected + 1] = g
    rejected[#rejected + 1] = conflict[1]
    rejected[#rejected + 1] = conflict[2]
  else
    for _, prefix in ipairs(ownDeleted) do
      for key in pairs(state) do
        if string.sub(key, 1, #prefix) == prefix then state[key] = 'gone' end
      end
      deleted[#deleted + 1] = prefix
    end
    for key, value in pairs(own) do state[key] = value end
    for list, length in pairs(ownLengths) do lengths[list] = length end
  end
end

-- The versions of the puts that apply, taken at once.
local version = 0
do
  local n = 0
  for _, ops in ipairs(groups) do
    if not ops.rejected then
      for _, op in ipairs(ops) do
        if op.name == 'put' or (op.name == 'next' and op.applies) then n = n + 1 end
      end
    end
  end
  if n > 0 then version = takeVersions(n) end
end

-- Apply. Removals and puts are gathered and written a few hundred at a time, in order: a pending write
-- of a key is flushed before another write of the same key, and all of them before a prefix deletion.
local removing, removingSet, putting, puttingSet = {}, {}, {}, {}
local earliest
local function note(dueAt)
  if not earliest or tonumber(dueAt) < earliest then earliest = tonumber(dueAt) end
end
local function flushRemovals()
  if #removing == 0 then return end
  chunked('HDEL', KEYS[1], nil, removing, 1)
  chunked('ZREM', KEYS[2], nil, removing, 1)
  chunked('ZREM', KEYS[3], nil, removing, 1)
  chunked('ZREM', KEYS[4], nil, removing, 1)
  removing, removingSet = {}, {}
end
local function flushPuts()
  if #putting == 0 then return end
  version = writePuts(putting, version)
  putting, puttingSet = {}, {}
end
local function remove(key)
  if puttingSet[key] then flushPuts() end
  if not removingSet[key] then
    removingSet[key] = true
    removing[#removing + 1] = key
  end
end

for _, ops in ipairs(groups) do
  if not ops.rejected then
    for _, op in ipairs(ops) do
      local name = op.name
      if name == 'append' then
        local stop = op.first + op.count - 1
        for first = op.first, stop, 480 do
          redis.call('RPUSH', op.list, unpack(ARGV, first, math.min(first + 479, stop)))
        end
      elseif name == 'put' or (name == 'next' and op.applies) then
        if removingSet[op.key] then flushRemovals() end
        if puttingSet[op.key] then flushPuts() end
        puttingSet[op.key] = true
        putting[#putting + 1] = op
        note(op.dueAt)
      elseif name == 'delete' or name == 'consume' then
        remove(op.key)
      elseif name == 'prefix' then
        flushPuts()
        flushRemovals()
        local low, high = prefixRange(op.key)
        local keys = redis.call('ZRANGEBYLEX', KEYS[4], low, high)
        for _, key in ipairs(keys) do remove(key) end
        flushRemovals()
      elseif name == 'dead' then
        redis.call('HSET', KEYS[8], op.key, op.record)
        redis.call('ZADD', KEYS[9], 0, op.key)
      elseif name == 'undead' then
        redis.call('HDEL', KEYS[8], op.key)
        redis.call('ZREM', KEYS[9], op.key)
      elseif name == 'fail' and op.applies then
        -- No write of this key is pending or done: it would have changed the version the check saw.
        local version, at = parseSchedule(KEYS[1], op.key, stored[op.key])
        if op.at ~= '' then
          at = op.at
          redis.call('ZADD', KEYS[3], at, op.key)
        end
        redis.call('ZADD', KEYS[2], op.dueAt, op.key)
        redis.call('HSET', KEYS[1], op.key, version .. ' ' .. at .. ' ' .. op.dueAt .. ' ' .. op.attempts .. ' '
          .. op.fields .. field('e', op.error) .. op.message)
        note(op.dueAt)
      end
    end
  end
end
flushPuts()
flushRemovals()

-- The unit's claims end.
for first = 1, #claimed, 400 do
  local last = math.min(first + 399, #claimed)
  local claims = redis.call('HMGET', KEYS[7], unpack(claimed, first, last))
  for j = first, last do
    if token ~= '' and string.match(claims[j - first + 1] or '', '^(%S+) ') == token then
      redis.call('HDEL', KEYS[7], claimed[j])
    end
  end
end

redis.call('SET', KEYS[6], #rejected == 0 and '1' or cjson.encode(rejected), 'PX', ARGV[1])
if earliest then redis.call('PUBLISH', ARGV[2], string.format('%d', earliest) .. ' ' .. ARGV[3]) end
table.insert(rejected, 1, 'ok')
return rejected
